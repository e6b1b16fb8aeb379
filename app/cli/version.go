package cli

import (
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/spf13/cobra"
)

// versionInfo is what `airlock version` reports.
type versionInfo struct {
	Version string      `json:"version"`
	Go      string      `json:"go"`
	OS      string      `json:"os"`
	Arch    string      `json:"arch"`
	Images  []imageInfo `json:"images"`
}

// imageInfo is one guest image as `airlock version` finds it; Dir is ""
// when it is not found.
type imageInfo struct {
	Name    string `json:"name"`
	Dir     string `json:"dir,omitempty"`
	Kernel  string `json:"kernel,omitempty"`
	Builder string `json:"builder,omitempty"`
	Key     string `json:"input_key,omitempty"`
}

// findImages reports each guest image where a run would look for it
// (sandbox.ImageSearchPathFor), from its manifest alone: a run verifies
// the artifacts.
func findImages() []imageInfo {
	var l []imageInfo
	for _, name := range sandbox.ImageNames {
		info := imageInfo{Name: name}
		for _, d := range sandbox.ImageSearchPathFor(name, runtime.GOARCH) {
			m, err := manifest.Load(d)
			if err != nil || m.Name() != name || m.Arch != runtime.GOARCH {
				continue
			}
			info.Dir, info.Kernel, info.Builder, info.Key = d, m.KernelVersion, m.BuilderVersion, m.InputKey
			break
		}
		l = append(l, info)
	}
	return l
}

func newVersionCmd(stdio Stdio, g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Show Airlock's version, the Go it was built with and the guest images it finds", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo{Version: Version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Images: findImages()}
			if g.json {
				return printJSON(stdio.Out, v)
			}
			fmt.Fprintf(stdio.Out, "airlock %s\n", v.Version)
			fmt.Fprintf(stdio.Out, "built with %s for %s/%s\n", v.Go, v.OS, v.Arch)
			for _, im := range v.Images {
				if im.Dir == "" {
					fmt.Fprintf(stdio.Out, "image %s: not found (set AIRLOCK_IMAGE_DIR to the folder that holds it)\n", im.Name)
					continue
				}
				key := im.Key
				if len(key) > 12 {
					key = key[:12]
				}
				fmt.Fprintf(stdio.Out, "image %s: kernel %s, builder %s, build %s, in %s\n", im.Name, im.Kernel, im.Builder, key, im.Dir)
			}
			return nil
		},
	}
}
