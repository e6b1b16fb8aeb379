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
  const select = h("select", { "data-testid": "vm-image", "aria-label": "Image" }, IMAGES.map((i) => h("option", { value: i.id }, i.name))) as HTMLSelectElement;
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
    const image = select.value;
    const keepDisk = image === "standard" && keep.checked;
    await busy(null, async () => store.setStatus(await api.setImage(image, keepDisk)), err);
    render();
  }
  select.addEventListener("change", () => void apply());
  keep.addEventListener("change", () => void apply());

  function render(): void {
    const s = store.session;
    const image = s?.image || "minimal";
    if (document.activeElement !== select) select.value = image;
    const kernel = s?.kernel && select.value === image ? ` Kernel ${s.kernel}.` : "";
    about.textContent = (IMAGES.find((i) => i.id === select.value)?.about ?? "") + kernel;
    keep.checked = !!s?.keep_disk;
    keep.disabled = select.value !== "standard";
    reset.disabled = select.value !== "standard";
  }

  const el = card(
    "Image",
    select,
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
