// The machine's size on the Machine screen: processors and memory, checked
// by the service against this computer, applied on the next start.

import { api } from "../api";
import { h } from "../dom";
import { memory } from "../format";
import { store } from "../store";
import { busy, button } from "../ui";

export function sizeForm(): { el: HTMLElement; render: () => void } {
  const cpus = h("input", { type: "number", class: "input size-input", min: "1", step: "1", id: "vm-size-cpus", "data-testid": "vm-cpus-input" }) as HTMLInputElement;
  const mem = h("input", { type: "number", class: "input size-input", min: "0.25", step: "0.25", id: "vm-size-memory", "data-testid": "vm-memory-input" }) as HTMLInputElement;
  const apply = button("Apply", { variant: "primary", type: "submit", testid: "vm-size-apply" });
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "vm-size-error" });
  const note = h("p", { class: "hint", "data-testid": "vm-size-note" });
  let editing = false; // the user has typed: keep what they typed

  // mark outlines the field a refusal is about (none: clear both).
  function mark(field: HTMLInputElement | null): void {
    cpus.classList.toggle("input-error", field === cpus);
    mem.classList.toggle("input-error", field === mem);
  }

  async function submit(): Promise<void> {
    mark(null);
    const n = Number(cpus.value);
    const gb = Number(mem.value);
    if (cpus.value.trim() === "" || !Number.isInteger(n)) {
      err.textContent = "Type a whole number of processors.";
      mark(cpus);
      return;
    }
    if (mem.value.trim() === "" || !Number.isFinite(gb)) {
      err.textContent = "Type the memory in GB, such as 2 or 1.5.";
      mark(mem);
      return;
    }
    // The service checks the size against this computer and says why not.
    const ok = await busy(apply, async () => store.setStatus(await api.setMachine(n, Math.round(gb * 1024))), err);
    // The service's reason names CPUs or memory first.
    mark(ok ? null : /^\d+ CPUs/.test(err.textContent ?? "") ? cpus : mem);
    if (ok) editing = false;
    render();
  }

  for (const i of [cpus, mem]) i.addEventListener("input", () => ((editing = true), (err.textContent = ""), mark(null)));

  function render(): void {
    const st = store.status;
    if (!st) return;
    const want = st.settings;
    const lim = st.limits;
    if (lim) {
      cpus.max = String(lim.max_cpus);
      mem.max = String(lim.max_memory_mib / 1024);
    }
    if (!editing) {
      cpus.value = String(want.cpus);
      mem.value = String(want.memory_mib / 1024);
    }
    const s = st.session;
    const on = s.state !== "stopped" && s.state !== "failed";
    const pending = on && (s.cpus !== want.cpus || s.memory_mib !== want.memory_mib);
    const range = lim ? `This computer allows 1 to ${lim.max_cpus} processors and ${memory(lim.min_memory_mib)} to ${memory(lim.max_memory_mib)} of memory.` : "";
    if (pending) {
      note.textContent = `Set to ${want.cpus} ${want.cpus === 1 ? "processor" : "processors"} and ${memory(want.memory_mib)}: applies on the next start (Restart to apply it now; running tasks would be lost).`;
      note.classList.add("size-pending");
    } else {
      note.textContent = `${range} A change applies on the next start.`.trim();
      note.classList.remove("size-pending");
    }
  }

  const el = h(
    "form",
    {
      class: "size-form",
      novalidate: "",
      "data-testid": "vm-size-form",
      onsubmit: (e: SubmitEvent) => {
        e.preventDefault();
        void submit();
      },
    },
    h(
      "div",
      { class: "row size-row" },
      h("label", { class: "size-field", for: "vm-size-cpus" }, h("span", null, "Processors"), cpus),
      h("label", { class: "size-field", for: "vm-size-memory" }, h("span", null, "Memory (GB)"), mem),
      apply,
    ),
    err,
    note,
  );
  render();
  return { el, render };
}
