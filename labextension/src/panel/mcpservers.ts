/**
 * The side panel's MCP servers: those the service runs for `--mcp`, each with its state
 * (stopped, running, failed with its error, or disabled) and its tools. A service without
 * MCP (`GET lmsp/v1/mcp/servers` is 404) shows nothing at all.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { mcpServerDetails, mcpServerStatus } from './models';
import { listRow, rowsOrEmpty } from './panelrows';
import { element } from '../render/dom';
import type { ILmspMcpServer } from '../protocol/types';

/** The panel's section of MCP servers; `node` goes into the panel. */
export class McpServerList {
  readonly node = element('section', 'lmsp-panel-mcp');
  private readonly _list = element('ul', 'lmsp-panel-servers');
  private readonly _trans: Pick<TranslationBundle, '__'>;
  /** The JSON last shown, so an unchanged poll leaves the DOM alone. */
  private _shown = '';

  constructor(trans: Pick<TranslationBundle, '__'>) {
    this._trans = trans;
    this.node.append(element('h3', 'lmsp-panel-section', trans.__('MCP servers')), this._list);
    this.node.hidden = true;
  }

  /** Show `servers`; `null` (a service without MCP) hides the section. */
  show(servers: ILmspMcpServer[] | null): void {
    const json = JSON.stringify(servers);
    if (json === this._shown) {
      return;
    }
    this._shown = json;
    this.node.hidden = servers === null;
    this._list.replaceChildren(
      ...rowsOrEmpty(
        (servers ?? []).map(server => this._row(server)),
        this._trans.__('No MCP servers configured')
      )
    );
  }

  private _row(server: ILmspMcpServer): HTMLLIElement {
    const { row, line } = listRow('server', server.label, mcpServerStatus(server));
    row.append(line, element('div', 'lmsp-panel-details', mcpServerDetails(server).join(' · ')));
    if (server.error) {
      row.append(element('div', 'lmsp-panel-server-error', server.error));
    }
    if (server.tools?.length) {
      const tools = element('details', 'lmsp-panel-server-tools');
      tools.append(element('summary', '', this._trans.__('Tools')));
      for (const tool of server.tools) {
        const name = element('code', 'lmsp-panel-tool', tool.name);
        name.title = tool.description ?? '';
        tools.append(name, ' ');
      }
      row.append(tools);
    }
    return row;
  }
}
