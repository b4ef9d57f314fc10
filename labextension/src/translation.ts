/**
 * The translation of the extension's text, one bundle for every plugin and view of it.
 */
import { nullTranslator, type ITranslator, type TranslationBundle } from '@jupyterlab/translation';

/**
 * The translation domain of the extension's text: its Python package's name, as JupyterLab
 * language packs name the catalogs of extensions.
 */
const TRANSLATION_DOMAIN = 'lmsp_jupyter';

/** The extension's bundle from the application's translator (English without one). */
export function extensionBundle(translator: ITranslator | null = null): TranslationBundle {
  return (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
}
