// The UI's picture of Airlock: loaded once, then kept current by the event
// stream (/v1/events), re-read whole after a reconnect or a lag event.

import { api, ApiError, type Ask, type Changes, type Decision, type Event, type SessionStatus, type Settings, type Status, type Task } from "./api";

export type Topic = "status" | "tasks" | "egress" | "asks" | "conn" | "changes";

const MAX_DECISIONS = 2000;

class Store {
  status: Status | null = null;
  /** statusAt is when status.session was received, for counting elapsed time on. */
  statusAt = 0;
  tasks = new Map<string, Task>();
  decisions: Decision[] = [];
  asks = new Map<string, Ask>();
  connected = false;
  lastError = "";
  /** changes is the workspace's mode and pending changes; null until read or where the service has none. */
  changes: Changes | null = null;
  /** changesError says why the pending changes could not be read ("" when they were). */
  changesError = "";
  private changesLoading: Promise<void> | null = null;
  private changesAgain = false;

  private listeners = new Set<(t: Topic) => void>();
  private pending = new Set<Topic>();
  private scheduled = false;

  on(fn: (t: Topic) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** emit coalesces notifications into one per topic per frame. */
  emit(t: Topic): void {
    this.pending.add(t);
    if (this.scheduled) return;
    this.scheduled = true;
    const flush = () => {
      this.scheduled = false;
      const ts = [...this.pending];
      this.pending.clear();
      for (const topic of ts) for (const fn of this.listeners) fn(topic);
    };
    if (document.visibilityState === "visible") requestAnimationFrame(flush);
    else setTimeout(flush, 50);
  }

  get session(): SessionStatus | undefined {
    return this.status?.session;
  }

  get settings(): Settings | undefined {
    return this.status?.settings;
  }

  setStatus(s: Status): void {
    const moved = this.status !== null && (this.status.session.workspace !== s.session.workspace || this.status.settings.workspace !== s.settings.workspace);
    this.status = s;
    // Pending changes belong to a workspace: another folder has its own.
    if (moved) void this.refreshChanges();
    this.statusAt = Date.now();
    this.emit("status");
  }

  /**
   * putTask stores a snapshot unless the one held is newer: an answer to
   * POST /v1/tasks can arrive after the events that moved the task on.
   */
  putTask(t: Task): void {
    const old = this.tasks.get(t.id);
    if (old && (rank(old) > rank(t) || (rank(old) === rank(t) && old.output.log_bytes > t.output.log_bytes))) return;
    this.tasks.set(t.id, t);
    this.emit("tasks");
  }

  setSettings(s: Settings): void {
    if (this.status) {
      this.status = { ...this.status, settings: s };
      this.emit("status");
    }
  }

  /** pendingChanges counts the changes waiting for review. */
  get pendingChanges(): number {
    return this.changes?.entries?.length ?? 0;
  }

  /**
   * refreshChanges reads the pending changes again. Calls while a read is
   * under way coalesce into one more read after it, so a burst of changes
   * events costs two requests, not one each.
   */
  refreshChanges(): Promise<void> {
    if (this.changesLoading) {
      this.changesAgain = true;
      return this.changesLoading;
    }
    this.changesLoading = (async () => {
      do {
        this.changesAgain = false;
        try {
          this.changes = await api.changes();
          this.changesError = "";
        } catch (e) {
          // A service without the changes API (404) has nothing to review.
          if (e instanceof ApiError && e.status === 404) this.changes = null;
          this.changesError = e instanceof ApiError && e.status === 404 ? "" : (e as Error).message;
        }
        this.emit("changes");
      } while (this.changesAgain);
    })().finally(() => (this.changesLoading = null));
    return this.changesLoading;
  }

  async refreshStatus(): Promise<void> {
    this.setStatus(await api.status());
  }

  async refreshAll(): Promise<void> {
    const [status, tasks, log, asks] = await Promise.all([
      api.status(),
      api.tasks(),
      api.egressLog(),
      api.asks().catch(() => [] as Ask[]),
    ]);
    this.setStatus(status);
    this.tasks = new Map(tasks.map((t) => [t.id, t]));
    this.emit("tasks");
    this.decisions = log.slice(-MAX_DECISIONS);
    this.emit("egress");
    this.asks = new Map(asks.map((a) => [a.id, a]));
    this.emit("asks");
    void this.refreshChanges();
  }

  apply(e: Event): void {
    switch (e.kind ?? e.type) {
      case "session":
        if (e.session?.status && this.status) {
          if (e.session.status.workspace !== this.status.session.workspace) void this.refreshChanges();
          this.status = { ...this.status, session: e.session.status };
          this.statusAt = Date.now();
          this.emit("status");
        }
        if (e.session?.kind === "lost" || e.session?.kind === "reconnected") void this.refreshStatus().catch(() => {});
        break;
      case "task": {
        const te = e.task;
        if (!te) break;
        if (te.kind === "removed") {
          this.tasks.delete(te.task.id);
          this.emit("tasks");
        } else this.putTask(te.task);
        if (te.kind !== "output" && this.status) {
          // running_tasks is part of the status; keep it in step.
          const running = [...this.tasks.values()].filter((t) => t.state === "running" || t.state === "queued").length;
          this.status = { ...this.status, running_tasks: running };
          this.emit("status");
        }
        break;
      }
      case "egress":
        if (e.egress) {
          const last = this.decisions[this.decisions.length - 1];
          if (!last || e.egress.seq > last.seq) {
            this.decisions.push(e.egress);
            if (this.decisions.length > MAX_DECISIONS) this.decisions.splice(0, this.decisions.length - MAX_DECISIONS);
            this.emit("egress");
          }
          // An allow-always answer changes the allow list.
          if (e.egress.reason === "allowed-by-ask") void api.settings().then((s) => this.setSettings(s)).catch(() => {});
        }
        break;
      case "ask":
        if (e.ask) {
          this.asks.set(e.ask.id, e.ask);
          this.emit("asks");
        }
        break;
      case "ask-answered":
        if (e.ask) {
          this.asks.delete(e.ask.id);
          this.emit("asks");
          if (e.ask.verdict === "allow-always") void api.settings().then((s) => this.setSettings(s)).catch(() => {});
        }
        break;
      case "changes":
        void this.refreshChanges();
        break;
      case "lag":
        void this.refreshAll().catch(() => {});
        break;
    }
  }

  /** follow keeps the event stream open for the life of the page, reconnecting with back-off. */
  async follow(): Promise<void> {
    let delay = 500;
    for (;;) {
      const ctl = new AbortController();
      try {
        // Subscribe first, then read the state, so nothing falls between.
        let events = api.events((e) => this.apply(e), ctl.signal);
        events.catch(() => {});
        await this.refreshAll();
        this.connected = true;
        this.lastError = "";
        this.emit("conn");
        delay = 500;
        // A window that cannot stream gets short answers: ask again at once.
        while ((await events).polled) {
          events = api.events((e) => this.apply(e), ctl.signal);
        }
      } catch (e) {
        this.lastError = (e as Error).message;
      }
      ctl.abort();
      this.connected = false;
      this.emit("conn");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }
}

function rank(t: Task): number {
  return t.state === "queued" ? 0 : t.state === "running" ? 1 : 2;
}

export const store = new Store();
