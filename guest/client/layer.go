package client

import (
	"context"
	"errors"
	"io"
)

// errLayerUnbuilt marks the layer calls while they are being written.
var errLayerUnbuilt = errors.New("client: layer calls not built yet")

// ExportLayer streams the guest's changes layer (the upper layer of the
// overlay at /workspace, in a sandbox booted with changes held) as a tar
// in the OCI layer format: a deleted path is an empty ".wh.NAME", a folder
// that hides the shared folder's holds ".wh..wh..opq". The stream ends
// with io.EOF only when the guest sent all of it; the caller closes it.
func (c *Client) ExportLayer(ctx context.Context) (io.ReadCloser, error) {
	return nil, errLayerUnbuilt
}

// ForgetLayer removes paths (slash-separated, relative to /workspace; all
// when none) from the changes layer, so /workspace shows the shared
// folder's own version there again.
func (c *Client) ForgetLayer(ctx context.Context, paths []string) error {
	return errLayerUnbuilt
}
