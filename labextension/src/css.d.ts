/** CSS files imported by the widget bundle come in as text (esbuild's text loader). */
declare module '*.css' {
  const text: string;
  export default text;
}
