/**
 * The translation domain of the extension's text: its Python package's name, as JupyterLab
 * language packs name the catalogs of extensions.
 */
export const TRANSLATION_DOMAIN = 'lmsp_jupyter';
