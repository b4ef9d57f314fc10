// Bundle src/widget.ts into the anywidget ES module lmsp_jupyter/static/widget.js.
import { build } from 'esbuild';

await build({
  entryPoints: ['src/widget.ts'],
  outfile: '../lmsp_jupyter/static/widget.js',
  bundle: true,
  format: 'esm',
  target: 'es2020',
  loader: { '.css': 'text' },
  minify: process.argv.includes('--minify'),
  legalComments: 'none',
  logLevel: 'warning'
});
