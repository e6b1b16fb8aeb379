// The control API client: the same JSON the CLI and the MCP server use
// (app/api/server.go). In the browser it is served next to this page by
// `airlock serve --http`; the desktop shell may point it elsewhere with
// window.airlockNative.apiBase.

export type SessionState = "stopped" | "starting" | "running" | "stopping" | "restarting" | "failed";

export interface SessionStatus {
  state: SessionState;
  phase?: string;
  elapsed_ns: number;
  generation: number;
  workspace: string;
  read_only: boolean;
  cpus: number;
  memory_mib: number;
  image?: string;
  keep_disk?: boolean;
  /** The image's kernel release: "6.1.192-airlock" when built from linux-source (Linux amd64). */
  kernel?: string;
  accelerator?: string;
  pid?: number;
  boot_time_ns: number;
  uptime_ns: number;
  restarts: number;
  agent_restarts: number;
  failures: number;
  retry_in_ns?: number;
  last_error?: string;
  console_log?: string;
}

export interface Settings {
  workspace: string;
  cpus: number;
  memory_mib: number;
  read_only: boolean;
  allow: string[];
  deny: string[];
  map_hosts: string[];
  secrets?: SecretMeta[];
  upstream_cas?: string[];
  upstream_proxy?: string;
  inspect?: boolean;
  image?: string;
  keep_disk?: boolean;
  /** changes maps workspaces to how they take the sandbox's writes; a folder not listed is auto. */
  changes?: Record<string, ChangesMode>;
}

/** SecretMeta is what the settings keep of a secret: never its value. */
export interface SecretMeta {
  name: string;
  hosts: string[];
  header?: string;
  source: string;
  placeholder: string;
}

export interface SecretInfo extends SecretMeta {
  available: boolean;
  problem?: string;
  note?: string;
}

/** SecretRequest carries the value once, to the service; it is never sent back. */
export interface SecretRequest {
  name: string;
  hosts: string[];
  header?: string;
  value?: string;
  from_env?: string;
  from_file?: string;
}

export interface Status {
  session: SessionStatus;
  settings: Settings;
  running_tasks: number;
  state_dir: string;
  // Not served yet; shown when a later API adds them.
  version?: string;
  settings_path?: string;
}

export type TaskState = "queued" | "running" | "exited" | "killed" | "timed-out" | "lost";

export interface Task {
  id: string;
  command: { argv?: string[]; shell?: string; env?: string[]; cwd?: string; root?: boolean; tty?: boolean; timeout?: number };
  state: TaskState;
  exit: { code: number; signal?: number };
  reason?: string;
  created: string;
  started?: string;
  ended?: string;
  deadline?: string;
  output: { stdout: number; stderr: number; log_bytes: number; dropped?: number; truncated?: boolean; error?: string };
}

export interface Chunk {
  offset: number;
  stream: "stdout" | "stderr";
  data: Uint8Array;
}

export interface Decision {
  seq: number;
  time: string;
  task?: string;
  protocol: "http" | "connect" | "socks";
  host?: string;
  port?: number;
  addr?: string;
  decision: "allow" | "deny";
  reason: string;
  rule?: string;
  detail?: string;
  /** secrets names the secrets the gate added (names only). */
  secrets?: string[];
  bytes_up: number;
  bytes_down: number;
  duration_ns: number;
  /** repeated, on a summary, counts the identical refusals after the one before it. */
  repeated?: number;
}

export interface Ask {
  id: string;
  task?: string;
  protocol: string;
  host: string;
  port: number;
  time: string;
  /** more lists the other host:port the task asked for meanwhile; one answer covers all. */
  more?: string[];
  verdict?: string;
}

export type Verdict = "allow-once" | "allow-always" | "deny";

export interface RunRequest {
  shell?: string;
  argv?: string[];
  env?: string[];
  cwd?: string;
  root?: boolean;
  timeout_ns?: number;
  stdin?: string;
}

export type ChangesMode = "direct" | "review" | "auto";

export type ChangeKind = "added" | "modified" | "deleted" | "renamed" | "mode";

/** ChangeEntry is one pending change (app/changes.Entry); every string in it is the guest's. */
export interface ChangeEntry {
  path: string;
  kind: ChangeKind | string;
  from?: string;
  type?: "file" | "dir" | "symlink" | string;
  mode?: number;
  size: number;
  mtime?: string;
  link?: string;
  text?: boolean;
  lines_added?: number;
  lines_removed?: number;
  host_runs?: boolean;
  conflict?: boolean;
}

export interface ChangesUsage {
  pending_bytes: number;
  checkpoint_bytes: number;
  limit_bytes: number;
}

export interface Changes {
  mode: ChangesMode;
  entries: ChangeEntry[] | null;
  usage?: ChangesUsage;
}

export interface Checkpoint {
  id: string;
  time: string;
  paths: string[] | null;
  bytes: number;
  undone?: boolean;
  summary: string;
}

export interface ApplyResult {
  checkpoint?: string;
  applied: string[] | null;
  conflicts?: string[] | null;
  refused?: { path: string; reason: string }[] | null;
}

export interface Event {
  kind: "session" | "task" | "egress" | "ask" | "ask-answered" | "lag" | "changes" | string;
  /** type is accepted as a synonym of kind for the changes event. */
  type?: string;
  /** pending counts the waiting changes (changes events). */
  pending?: number;
  changes?: { pending?: number };
  session?: { kind: "state" | "lost" | "reconnected" | "lag"; time: string; status?: SessionStatus; generation?: number; error?: string };
  task?: { kind: "created" | "state" | "output" | "removed"; task: Task };
  egress?: Decision;
  ask?: Ask;
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
  const bytes = new TextEncoder().encode(s);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

// Log chunks are tasks.Chunk, whose fields carry no JSON tags today
// (Offset, Stream 1|2, Data); accept the lower-case form as well.
interface RawChunk {
  Offset?: number;
  Stream?: number | string;
  Data?: string;
  offset?: number;
  stream?: number | string;
  data?: string;
}

function chunk(c: RawChunk): Chunk {
  const s = c.stream ?? c.Stream;
  return {
    offset: c.offset ?? c.Offset ?? 0,
    stream: s === 2 || s === "stderr" ? "stderr" : "stdout",
    data: b64(c.data ?? c.Data ?? ""),
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
    const end = await stream<RawChunk>(`/v1/tasks/${encodeURIComponent(id)}/log?offset=${from}&follow=1`, (c) => take(chunk(c)), signal);
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
  setWorkspace: (dir: string, readOnly: boolean, changes?: ChangesMode) => call<Status>("PUT", "/v1/workspace", { dir, read_only: readOnly, changes }),
  setImage: (image: string, keepDisk: boolean) => call<Status>("PUT", "/v1/image", { image, keep_disk: keepDisk }),
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
    const p = await call<{ chunks: RawChunk[]; next: number }>("GET", `/v1/tasks/${encodeURIComponent(id)}/log?offset=${offset}`);
    return { chunks: p.chunks.map(chunk), next: p.next };
  },
  followLog,

  egressLog: () => call<Decision[]>("GET", "/v1/egress/log"),
  rule: (action: "allow" | "deny" | "remove", pattern: string) => call<Settings>("POST", "/v1/egress/rules", { action, pattern }),

  secrets: () => call<SecretInfo[]>("GET", "/v1/secrets"),
  setSecret: (req: SecretRequest) => call<SecretInfo>("PUT", `/v1/secrets/${encodeURIComponent(req.name)}`, req),
  removeSecret: (name: string) => call<void>("DELETE", `/v1/secrets/${encodeURIComponent(name)}`),

  changes: () => call<Changes>("GET", "/v1/changes"),
  /** diff is the unified diff of the paths, as text, cut at limit bytes. */
  diff: async (paths: string[], signal?: AbortSignal, limit = 4 << 20) => readCapped(await callRaw(`/v1/changes/diff?${pathQuery(paths)}`, signal), limit),
  /** content is a path's new bytes with the Content-Type the service sniffed. */
  content: async (path: string, signal?: AbortSignal) => (await callRaw(`/v1/changes/content?${pathQuery([path])}`, signal)).blob(),
  applyChanges: (paths: string[], force = false) => call<ApplyResult>("POST", "/v1/changes/apply", { paths, force }),
  discardChanges: (paths: string[]) => call<{ discarded: string[] | null }>("POST", "/v1/changes/discard", { paths }),
  checkpoints: () => call<{ checkpoints: Checkpoint[] | null; usage?: ChangesUsage }>("GET", "/v1/checkpoints"),
  undo: (id = "") => call<Checkpoint>("POST", "/v1/checkpoints/undo", { id }),

  asks: () => call<Ask[]>("GET", "/v1/asks"),
  answer: (id: string, verdict: Verdict) => call<void>("POST", `/v1/asks/${encodeURIComponent(id)}`, { verdict }),

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
