// Command airlock-guest is /init in the guest initramfs (Linux only, built
// with CGO_ENABLED=0). As PID 1, or with the "init" argument, it is the
// guest's init (guest/boot), which runs the guest agent (guest/agent) in
// the same process. With agent.TaskInitArg it is a task's init, PID 1 of
// the task's own PID namespace (see guest/agent).
package main
