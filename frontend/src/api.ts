// The control API client: the same JSON the CLI and the MCP server use
// (app/api/server.go). In the browser it is served next to this page by
// `airlock serve --http`; the desktop shell may point it elsewhere with
// window.airlockNative.apiBase.

// The types of what the API sends and takes are generated from its Go types
// (frontend/src/gen, make tsgen); the names below are the UI's for them.
import type * as agents from "./gen/agents";
import type * as apiTypes from "./gen/api";
import type * as changes from "./gen/changes";
import type * as egress from "./gen/egress";
import type * as service from "./gen/service";
import type * as session from "./gen/session";
import type * as settings from "./gen/settings";
import type * as tasks from "./gen/tasks";

export type SessionState = session.State;
export type SessionStatus = session.Status;
export type Settings = settings.Settings;
/** SecretMeta is what the settings keep of a secret: never its value. */
export type SecretMeta = settings.Secret;
export type SecretInfo = service.SecretInfo;
/** SecretRequest carries the value once, to the service; it is never sent back. */
export type SecretRequest = service.SecretRequest;
export type Status = service.Status;
export type TaskState = tasks.State;
export type Task = tasks.Task;
export type Decision = egress.Decision;
export type Ask = service.Ask;
export type RunRequest = service.RunRequest;
export type TerminalRequest = service.TerminalRequest;
export type TerminalControl = apiTypes.TerminalControl;
export type ChangesMode = changes.Mode;
export type ChangeKind = changes.Kind;
/** ChangeEntry is one pending change; every string in it is the guest's. */
export type ChangeEntry = changes.Entry;
export type ChangesUsage = changes.Usage;
export type Changes = service.ChangesList;
export type Checkpoint = changes.Checkpoint;
export type ApplyResult = changes.ApplyResult;
export type Event = service.Event;
/** AgentStatus is one agent on this machine: found, connected, its file. */
export type AgentStatus = agents.Status;
export type AgentResult = agents.Result;

/**
 * Verdict is an answer the UI gives to an ask: the service's Verdict*
 * constants (AnswerRequest.verdict is a plain string in Go).
 */
export type Verdict = "allow-once" | "allow-always" | "deny";

/** Chunk is a decoded record of a task's log (tasks.Chunk carries base64). */
export interface Chunk {
  offset: number;
  stream: "stdout" | "stderr";
  data: Uint8Array;
}

/** ApiError is an answer other than 2xx, with the API's error code. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
  }
}

interface Native {
  /** apiBase and apiToken point the UI at a control API elsewhere than this page's origin. */
  apiBase?: string;
  apiToken?: string;
  chooseFolder?: () => Promise<string | null | undefined>;
  openPath?: (path: string) => Promise<void> | void;
}

declare global {
  interface Window {
    /** Set by the desktop shell (Wails); absent in a plain browser. */
    airlockNative?: Native;
  }
}

interface WailsBindings {
  ChooseFolder?: (title: string, dir: string) => Promise<string>;
}

/**
 * native is what the desktop shell offers: window.airlockNative when it sets
 * one, else the Wails bindings (window.go.desktop.Bindings); undefined in a
 * plain browser.
 */
export function native(): Native | undefined {
  if (window.airlockNative) return window.airlockNative;
  const b = (window as unknown as { go?: { desktop?: { Bindings?: WailsBindings } } }).go?.desktop?.Bindings;
  if (!b) return undefined;
  return {
    chooseFolder: b.ChooseFolder ? () => b.ChooseFolder!("Choose the folder to share", "") : undefined,
  };
}

// The token `airlock serve` printed arrives once in the page URL. The
// server has also set a cookie with it; we keep it in memory for the
// Authorization header and take it out of the address bar, so it is not
// left in the history or in screenshots.
let token = "";

export function takeTokenFromURL(): void {
  const url = new URL(window.location.href);
  const t = url.searchParams.get("token");
  if (t) {
    token = t;
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
}

function base(): string {
  return (native()?.apiBase ?? "").replace(/\/$/, "");
}

function headers(extra?: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  const t = token || native()?.apiToken;
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  let res: Response;
  try {
    res = await fetch(base() + path, {
      method,
      headers: headers(body === undefined ? undefined : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      signal,
    });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError("Airlock is not answering. Is it still running?", 0, "unreachable");
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let data: unknown = undefined;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON: keep the text for the message */
  }
  if (!res.ok) {
    const err = data as { error?: string; code?: string } | undefined;
    throw new ApiError(err?.error ?? (text.trim() || res.statusText), res.status, err?.code ?? "http");
  }
  return data as T;
}

/** callRaw answers a GET's body as a Response, after the same checks as call. */
async function callRaw(path: string, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(base() + path, { headers: headers(), credentials: "same-origin", signal });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError("Airlock is not answering. Is it still running?", 0, "unreachable");
  }
  if (!res.ok) {
    const text = await res.text();
    let err: { error?: string; code?: string } | undefined;
    try {
      err = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    throw new ApiError(err?.error ?? (text.trim() || res.statusText), res.status, err?.code ?? "http");
  }
  return res;
}

/** readCapped reads at most limit bytes of a body as UTF-8 text, and says whether it stopped short. */
async function readCapped(res: Response, limit: number): Promise<{ text: string; cut: boolean }> {
  if (!res.body) return { text: "", cut: false };
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = "";
  let got = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return { text: text + dec.decode(), cut: false };
    const room = limit - got;
    if (value.length >= room) {
      text += dec.decode(value.subarray(0, room));
      await reader.cancel().catch(() => {});
      return { text, cut: true };
    }
    got += value.length;
    text += dec.decode(value, { stream: true });
  }
}

function pathQuery(paths: string[]): string {
  return paths.map((p) => `path=${encodeURIComponent(p)}`).join("&");
}

function b64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function utf8ToBase64(s: string): string {
  return bytesToBase64(new TextEncoder().encode(s));
}

function bytesToBase64(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

function chunk(c: tasks.Chunk): Chunk {
  return {
    offset: c.Offset,
    stream: c.Stream === 2 ? "stderr" : "stdout",
    data: b64(c.Data ?? ""),
  };
}

/** StreamEnd says how a stream ended without an error. */
export interface StreamEnd {
  /**
   * polled: the server cut the stream short on purpose (header
   * X-Airlock-Stream: poll, in desktop windows that cannot stream); ask
   * again at once, it is not a lost connection.
   */
  polled: boolean;
}

/**
 * stream reads a newline-delimited JSON answer and hands each value to
 * onItem until the server ends it, the signal aborts it, or it breaks.
 * It resolves when the stream ended normally.
 */
export async function stream<T>(path: string, onItem: (v: T) => void, signal: AbortSignal): Promise<StreamEnd> {
  const res = await fetch(base() + path, { headers: headers(), credentials: "same-origin", signal });
  if (!res.ok || !res.body) {
    let msg = res.statusText;
    let code = "http";
    try {
      const e = (await res.json()) as { error?: string; code?: string };
      msg = e.error ?? msg;
      code = e.code ?? code;
    } catch {
      /* ignore */
    }
    throw new ApiError(msg, res.status, code);
  }
  const polled = res.headers.get("X-Airlock-Stream") === "poll";
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onItem(JSON.parse(line) as T); // empty lines are keep-alives
    }
  }
  return { polled };
}

/**
 * followLog hands over a task's output from the start, as it arrives,
 * until the task has ended and everything was read. Where the server cuts
 * streams short (long polling), it asks again from where it got to.
 */
async function followLog(id: string, onChunk: (c: Chunk) => void, signal: AbortSignal): Promise<void> {
  let from = 0;
  let last = -1; // offset of the last chunk handed over
  const take = (c: Chunk) => {
    if (c.offset <= last) return;
    last = c.offset;
    onChunk(c);
  };
  for (;;) {
    const end = await stream<tasks.Chunk>(`/v1/tasks/${encodeURIComponent(id)}/log?offset=${from}&follow=1`, (c) => take(chunk(c)), signal);
    if (!end.polled) return;
    if (last >= 0) {
      // The offset after the last record is known only to the server:
      // read one page from that record, which also tells where to go on.
      const page = await api.logPage(id, last);
      page.chunks.forEach(take);
      from = page.next;
    }
  }
}

export const api = {
  status: () => call<Status>("GET", "/v1/status"),
  settings: () => call<Settings>("GET", "/v1/settings"),
  vm: (action: "start" | "stop" | "restart") => call<Status>("POST", `/v1/vm/${action}`),
  setWorkspace: (dir: string, readOnly: boolean, changes?: ChangesMode) => call<Status>("PUT", "/v1/workspace", { dir, read_only: readOnly, changes } satisfies apiTypes.WorkspaceRequest),
  setImage: (image: string, keepDisk: boolean) => call<Status>("PUT", "/v1/image", { image, keep_disk: keepDisk } satisfies apiTypes.ImageRequest),
  setMachine: (cpus: number, memoryMiB: number) => call<Status>("PUT", "/v1/machine", { cpus, memory_mib: memoryMiB } satisfies apiTypes.MachineRequest),
  resetDisk: () => call<Status>("POST", "/v1/disk/reset"),

  run: (req: RunRequest) => call<Task>("POST", "/v1/tasks", req),
  runShell: (line: string, opts: { root?: boolean; timeoutSec?: number; stdin?: string } = {}) =>
    call<Task>("POST", "/v1/tasks", {
      shell: line,
      root: opts.root || undefined,
      timeout_ns: opts.timeoutSec ? opts.timeoutSec * 1e9 : undefined,
      stdin: opts.stdin ? utf8ToBase64(opts.stdin) : undefined,
    } satisfies RunRequest),
  tasks: () => call<Task[]>("GET", "/v1/tasks"),
  task: (id: string) => call<Task>("GET", `/v1/tasks/${encodeURIComponent(id)}`),
  cancel: (id: string) => call<Task>("POST", `/v1/tasks/${encodeURIComponent(id)}/cancel`),
  async logPage(id: string, offset: number): Promise<{ chunks: Chunk[]; next: number }> {
    const p = await call<apiTypes.LogPage>("GET", `/v1/tasks/${encodeURIComponent(id)}/log?offset=${offset}`);
    return { chunks: (p.chunks ?? []).map(chunk), next: p.next };
  },
  followLog,

  openTerminal: (req: TerminalRequest) => call<Task>("POST", "/v1/terminals", req),
  closeTerminal: (id: string) => call<void>("DELETE", `/v1/terminals/${encodeURIComponent(id)}`),
  /**
   * terminalOutput reads a terminal's output from offset (-1: the recent
   * screen), waiting for some: how a window that cannot hold a WebSocket
   * (the desktop webview) follows it.
   */
  async terminalOutput(id: string, offset: number, signal: AbortSignal): Promise<{ data: Uint8Array; offset: number; next: number; ended: boolean }> {
    const o = await call<service.TerminalOutput>("GET", `/v1/terminals/${encodeURIComponent(id)}/output?offset=${offset}&follow=1`, undefined, signal);
    return { data: b64(o.data ?? ""), offset: o.offset, next: o.next, ended: !!o.ended };
  },
  terminalInput: (id: string, data: Uint8Array) =>
    call<void>("POST", `/v1/terminals/${encodeURIComponent(id)}/input`, { data: bytesToBase64(data) } satisfies apiTypes.TerminalInput),
  terminalResize: (id: string, rows: number, cols: number) =>
    call<void>("POST", `/v1/terminals/${encodeURIComponent(id)}/resize`, { rows, cols } satisfies apiTypes.TerminalResize),
  /**
   * terminalURL is the WebSocket of terminal id. A WebSocket carries no
   * Authorization header: the page's cookie (same origin) is its credential.
   */
  terminalURL: (id: string) => {
    const u = new URL(`${base()}/v1/terminals/${encodeURIComponent(id)}/attach`, window.location.href);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.toString();
  },

  egressLog: () => call<Decision[]>("GET", "/v1/egress/log"),
  rule: (action: "allow" | "deny" | "remove", pattern: string) => call<Settings>("POST", "/v1/egress/rules", { action, pattern } satisfies apiTypes.RuleRequest),

  secrets: () => call<SecretInfo[]>("GET", "/v1/secrets"),
  setSecret: (req: SecretRequest) => call<SecretInfo>("PUT", `/v1/secrets/${encodeURIComponent(req.name)}`, req),
  removeSecret: (name: string) => call<void>("DELETE", `/v1/secrets/${encodeURIComponent(name)}`),
  agents: () => call<AgentStatus[]>("GET", "/v1/agents"),
  connectAgent: (name: string, connect: boolean) => call<AgentResult>("POST", `/v1/agents/${encodeURIComponent(name)}/${connect ? "connect" : "disconnect"}`),

  changes: () => call<Changes>("GET", "/v1/changes"),
  /** diff is the unified diff of the paths, as text, cut at limit bytes. */
  diff: async (paths: string[], signal?: AbortSignal, limit = 4 << 20) => readCapped(await callRaw(`/v1/changes/diff?${pathQuery(paths)}`, signal), limit),
  /** content is a path's new bytes with the Content-Type the service sniffed. */
  content: async (path: string, signal?: AbortSignal) => (await callRaw(`/v1/changes/content?${pathQuery([path])}`, signal)).blob(),
  applyChanges: (paths: string[], force = false) => call<ApplyResult>("POST", "/v1/changes/apply", { paths, force } satisfies apiTypes.ApplyRequest),
  discardChanges: (paths: string[]) => call<apiTypes.DiscardResult>("POST", "/v1/changes/discard", { paths } satisfies apiTypes.DiscardRequest),
  checkpoints: () => call<service.CheckpointList>("GET", "/v1/checkpoints"),
  undo: (id = "") => call<Checkpoint>("POST", "/v1/checkpoints/undo", { id } satisfies apiTypes.UndoRequest),

  asks: () => call<Ask[]>("GET", "/v1/asks"),
  answer: (id: string, verdict: Verdict) => call<void>("POST", `/v1/asks/${encodeURIComponent(id)}`, { verdict } satisfies apiTypes.AnswerRequest),

  /** events follows /v1/events as a UI that answers asks. */
  events: (onEvent: (e: Event) => void, signal: AbortSignal) => stream<Event>("/v1/events?answer=1", onEvent, signal),
};

/** fullLog reads a task's whole log as text, stderr lines included. */
export async function fullLog(id: string): Promise<string> {
  const dec = new TextDecoder();
  let out = "";
  let off = 0;
  for (let i = 0; i < 100000; i++) {
    const page = await api.logPage(id, off);
    if (page.chunks.length === 0) break;
    for (const c of page.chunks) out += dec.decode(c.data, { stream: true });
    off = page.next;
  }
  return out + dec.decode();
}
