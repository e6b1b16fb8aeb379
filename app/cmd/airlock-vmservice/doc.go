// Command airlock-vmservice is Airlock's Windows service: it creates the
// Host Compute Service VMs the unprivileged app asks for (see
// app/vmservice). The NSIS installer registers it; by hand, as
// administrator:
//
//	airlock-vmservice install [-image-dir DIR]   register (LocalSystem, automatic start), or update
//	                                             the registration in place, and start it
//	airlock-vmservice stop                       stop it and wait for its process to exit (upgrades)
//	airlock-vmservice remove                     stop and unregister it
//	airlock-vmservice debug   [-image-dir DIR]   serve in this console (Ctrl+C stops)
//
// Started by the service control manager it serves until stopped.
package main
