// ESLint with the rules of the JupyterLab extension template (jupyterlab/extension-template):
// the recommended sets of ESLint, typescript-eslint and @jupyter/eslint-plugin, interfaces
// named `IName`, single quotes, braces on every block, `===`, arrow callbacks. Formatting is
// prettier's (`npm run lint` checks it first), so rules that would fight it are turned off.
import js from '@eslint/js';
import jupyter from '@jupyter/eslint-plugin';
import prettier from 'eslint-config-prettier';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig([
  { ignores: ['node_modules', 'lib', '**/*.js', '**/*.d.ts'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  jupyter.configs.recommended,
  prettier,
  {
    files: ['**/*.ts'],
    languageOptions: {
      globals: { ...globals.browser, ...globals.node }
    },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]', match: true }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['warn', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-use-before-define': 'off',
      quotes: ['error', 'single', { avoidEscape: true, allowTemplateLiterals: false }],
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error'
    }
  },
  {
    // Tests assert the English text; they show nothing to a user.
    files: ['test/**/*.ts'],
    rules: { 'jupyter/no-untranslated-string': 'off' }
  }
]);
