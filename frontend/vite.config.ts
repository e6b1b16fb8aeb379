import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig, type Plugin } from "vite";

// keepGitkeep puts back dist/.gitkeep, which Vite's emptyOutDir removes: the
// Go embed in frontend/embed.go (and the desktop main.go) needs dist/ to
// exist in a fresh clone, so the placeholder is committed.
function keepGitkeep(): Plugin {
  return {
    name: "airlock-keep-gitkeep",
    closeBundle() {
      writeFileSync(fileURLToPath(new URL("dist/.gitkeep", import.meta.url)), "");
    },
  };
}

export default defineConfig({
  // Relative asset URLs: the same build is served by `airlock serve --http`
  // and by the Wails asset server.
  base: "./",
  define: {
    __AIRLOCK_UI_VERSION__: JSON.stringify(process.env.AIRLOCK_VERSION ?? "dev"),
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    chunkSizeWarningLimit: 1024,
  },
  plugins: [keepGitkeep()],
});
