// Package transport gives the guest agent the same Listen(port) and
// DialHost(ctx, port) over every transport the host may offer: AF_VSOCK
// (virtio-vsock, Hyper-V sockets) or the stream multiplexer (guest/mux) on
// the virtio-serial port named api.SerialPortName.
package transport
