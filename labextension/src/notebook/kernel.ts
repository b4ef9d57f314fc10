/**
 * Messages from the MIME renderer to the kernel that runs an ask, on the `lmsp` comm.
 *
 * The connection does not handle comms: a second connection that did would close every
 * comm the kernel opens for other front ends (ipywidgets). Each message goes as a raw
 * comm_open, comm_msg, comm_close on the shell channel instead; no reply is needed.
 */
import { KernelMessage, type Kernel } from '@jupyterlab/services';
import { UUID } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

/** The comm target the IPython extension registers. */
export const COMM_TARGET = 'lmsp';

/** A click in the MIME renderer, as the kernel receives it. */
export type KernelRequest =
  | {
      type: 'decide';
      ask_id: string;
      call_id: string;
      decision: 'approve' | 'deny';
      /** What JupyterLab did for an approved notebook tool's call: the call's output. */
      output?: string;
      /** An approved MCP call's tool needs no approval for the rest of the kernel session. */
      always?: boolean;
    }
  | { type: 'stop'; ask_id: string };

/** Sends `lmsp` comm messages to running kernels, one connection per kernel. */
export class KernelMessenger {
  private readonly _kernels: Kernel.IManager;
  private readonly _connections = new Map<string, Kernel.IKernelConnection>();

  constructor(kernels: Kernel.IManager) {
    this._kernels = kernels;
    kernels.runningChanged.connect(this._dropStopped, this);
  }

  /** Emitted when kernels start or stop. */
  get kernelsChanged(): ISignal<Kernel.IManager, Kernel.IModel[]> {
    return this._kernels.runningChanged;
  }

  /** Whether the kernel with this id is running on the server. */
  isRunning(kernelId: string | null): boolean {
    if (!kernelId) {
      return false;
    }
    for (const model of this._kernels.running()) {
      if (model.id === kernelId) {
        return true;
      }
    }
    return false;
  }

  /** Send one request to kernel `kernelId` on a short-lived `lmsp` comm. */
  send(kernelId: string, request: KernelRequest): void {
    const kernel = this._connection(kernelId);
    const commId = UUID.uuid4();
    const header = {
      session: kernel.clientId,
      username: kernel.username,
      channel: 'shell' as const
    };
    kernel.sendShellMessage(
      KernelMessage.createMessage<KernelMessage.ICommOpenMsg<'shell'>>({
        ...header,
        msgType: 'comm_open',
        content: { comm_id: commId, target_name: COMM_TARGET, data: {} }
      })
    );
    kernel.sendShellMessage(
      KernelMessage.createMessage<KernelMessage.ICommMsgMsg<'shell'>>({
        ...header,
        msgType: 'comm_msg',
        content: { comm_id: commId, data: request }
      })
    );
    kernel.sendShellMessage(
      KernelMessage.createMessage<KernelMessage.ICommCloseMsg<'shell'>>({
        ...header,
        msgType: 'comm_close',
        content: { comm_id: commId, data: {} }
      })
    );
  }

  private _connection(kernelId: string): Kernel.IKernelConnection {
    let kernel = this._connections.get(kernelId);
    if (!kernel || kernel.isDisposed) {
      kernel = this._kernels.connectTo({ model: { id: kernelId, name: '' }, handleComms: false });
      this._connections.set(kernelId, kernel);
    }
    return kernel;
  }

  private _dropStopped(): void {
    for (const [kernelId, kernel] of Array.from(this._connections)) {
      if (!this.isRunning(kernelId)) {
        kernel.dispose();
        this._connections.delete(kernelId);
      }
    }
  }
}
