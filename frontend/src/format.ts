// Human forms of the API's numbers and codes.

import type { Decision, SessionState, Task } from "./api";

export function duration(ns: number): string {
  const s = ns / 1e9;
  if (s < 1) return `${Math.max(0, Math.round(s * 1000))} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const hr = Math.floor(m / 60);
  return `${hr} h ${m % 60} min`;
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function memory(mib: number): string {
  return mib >= 1024 ? `${(mib / 1024).toFixed(mib % 1024 ? 1 : 0)} GB` : `${mib} MB`;
}

export function clock(iso: string): string {
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function ago(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "";
  const s = Math.round((now - new Date(iso).getTime()) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export const sessionLabel: Record<SessionState, string> = {
  stopped: "Stopped",
  starting: "Starting",
  running: "Ready",
  stopping: "Stopping",
  restarting: "Restarting",
  failed: "Could not start",
};

/** taskOutcome says how a task is doing or ended, and a tone for its badge. */
export function taskOutcome(t: Task): { label: string; tone: "busy" | "ok" | "bad" | "muted" | "warn" } {
  switch (t.state) {
    case "queued":
      return { label: "Waiting", tone: "muted" };
    case "running":
      return { label: "Running", tone: "busy" };
    case "exited":
      if (t.exit.signal) return { label: `Ended by signal ${t.exit.signal}`, tone: "bad" };
      return t.exit.code === 0 ? { label: "Done", tone: "ok" } : { label: `Failed · exit ${t.exit.code}`, tone: "bad" };
    case "killed":
      return { label: "Cancelled", tone: "warn" };
    case "timed-out":
      return { label: "Timed out", tone: "warn" };
    case "lost":
      return { label: "Interrupted", tone: "bad" };
  }
  return { label: t.state, tone: "muted" };
}

export function commandLine(t: Task): string {
  if (t.command.shell) return t.command.shell;
  return (t.command.argv ?? []).map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(" ");
}

export function taskDuration(t: Task, now = Date.now()): string {
  if (!t.started) return "";
  const end = t.ended ? new Date(t.ended).getTime() : now;
  return duration((end - new Date(t.started).getTime()) * 1e6);
}

const reasons: Record<string, string> = {
  "allowed-by-rule": "On your allow list",
  "allowed-by-ask": "You allowed it",
  "denied-by-rule": "On your block list",
  "no-matching-rule": "Not on your allow list",
  "private-address": "Address inside your network",
  "metadata-address": "Cloud metadata address",
  "host-mismatch": "Request did not match its host",
  "bad-request": "Malformed request",
  "header-too-large": "Request too large",
  timeout: "Request too slow",
  "auth-failed": "Unknown task credential",
  "too-many-connections": "Too many connections",
  unsupported: "Unsupported request",
  "resolve-failed": "Name not found",
  "dial-failed": "Site did not answer",
  "ask-denied": "You blocked it",
  "ask-timeout": "No answer in time",
  "ask-failed": "Could not ask",
  "upstream-error": "Site broke the connection",
  shutdown: "Airlock was closing",
  "placeholder-refused": "Secret placeholder sent to the wrong site",
  "upstream-tls-failed": "Site's certificate not trusted",
};

export function reason(d: Decision): string {
  return reasons[d.reason] ?? d.reason;
}

export function target(host: string | undefined, port: number | undefined, protocol?: string): string {
  if (!host) return "(unknown)";
  const h = host.includes(":") ? `[${host}]` : host;
  const defaultPort = protocol === "http" ? 80 : 443;
  return port && port !== defaultPort ? `${h}:${port}` : h;
}
