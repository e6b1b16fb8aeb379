// The guest image choice on the Machine screen: minimal or standard, and
// whether the standard image keeps its changes on the workspace's disk.

import { api } from "../api";
import { h } from "../dom";
import { store } from "../store";
import { busy, button, card } from "../ui";

const IMAGES: { id: string; name: string; about: string }[] = [
  { id: "minimal", name: "Minimal", about: "A tiny Linux with basic shell tools. Starts fastest." },
  { id: "standard", name: "Standard", about: "Debian with Python and pip, git, curl, jq, sqlite3 and the libraries data packages need." },
];

export function imageCard(): { el: HTMLElement; render: () => void } {
  // A segmented control like the rest of the UI, one radio per image.
  const chooser = h("div", { class: "segmented image-choice", role: "radiogroup", "aria-label": "Image", "data-testid": "vm-image" });
  const choices = IMAGES.map((i) =>
    h("button", { type: "button", role: "radio", "data-image": i.id, "data-testid": `vm-image-${i.id}`, onclick: () => void choose(i.id) }, i.name),
  );
  chooser.append(...choices);
  let chosen = "";
  const about = h("p", { class: "hint", "data-testid": "vm-image-about" });
  const keep = h("input", { type: "checkbox", "data-testid": "vm-keep-disk", role: "switch" }) as HTMLInputElement;
  const err = h("p", { class: "field-error", role: "alert", "data-testid": "vm-image-error" });
  const reset = button("Reset disk", {
    icon: "restart",
    testid: "vm-reset-disk",
    title: "Delete what the standard image kept for this workspace; the sandbox restarts clean",
    onClick: () => void busy(reset, async () => store.setStatus(await api.resetDisk()), err),
  });

  async function apply(): Promise<void> {
    const image = chosen;
    const keepDisk = image === "standard" && keep.checked;
    await busy(null, async () => store.setStatus(await api.setImage(image, keepDisk)), err);
    chosen = "";
    render();
  }
  function choose(id: string): void {
    if (id === (store.session?.image || "minimal") && !chosen) return;
    chosen = id;
    show(id);
    void apply();
  }
  keep.addEventListener("change", () => {
    chosen = chosen || store.session?.image || "minimal";
    void apply();
  });

  function show(value: string): void {
    chooser.dataset.value = value;
    for (const b of choices) {
      const on = b.dataset.image === value;
      b.classList.toggle("on", on);
      b.setAttribute("aria-checked", String(on));
      b.tabIndex = on ? 0 : -1;
    }
  }
  // Arrow keys move between the images, as in any radio group.
  chooser.addEventListener("keydown", (e: KeyboardEvent) => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    e.preventDefault();
    const i = IMAGES.findIndex((m) => m.id === chooser.dataset.value);
    const next = IMAGES[(i + (e.key === "ArrowRight" ? 1 : IMAGES.length - 1)) % IMAGES.length];
    choices.find((b) => b.dataset.image === next.id)?.focus();
    choose(next.id);
  });

  function render(): void {
    const s = store.session;
    const image = s?.image || "minimal";
    const value = chosen || image;
    show(value);
    const kernel = s?.kernel && value === image ? ` Kernel ${s.kernel}.` : "";
    about.textContent = (IMAGES.find((i) => i.id === value)?.about ?? "") + kernel;
    keep.checked = !!s?.keep_disk;
    keep.disabled = value !== "standard";
    reset.disabled = value !== "standard";
  }

  const el = card(
    "Image",
    chooser,
    about,
    h(
      "label",
      { class: "switch" },
      keep,
      h("span", { class: "switch-track" }),
      h("span", null, h("strong", null, "Keep changes"), " — installed packages and files outside the workspace stay on a disk for this workspace; otherwise every start is clean"),
    ),
    reset,
    err,
  );
  render();
  return { el, render };
}
