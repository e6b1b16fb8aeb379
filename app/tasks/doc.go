// Package tasks is the host's record of tasks: their model and state
// machine, and a durable Store for their metadata and output.
//
// # Life of a task
//
//	queued ──> running ──> exited | killed | timed-out | lost
//	   └─────> killed | lost
//
// Final states are final (State.CanBecome is the table). The runner calls
// Create, Start, hands Stdout(id) and Stderr(id) to guest/client.Stdio, and
// Finish with the outcome; MarkLost when the VM dies. Env values are never
// kept: a Task lists the variable names only.
//
// # On disk
//
// One folder (0700) holds two files per task, named by its id (8 characters
// of lower-case base32):
//
//   - ID.json: the Task as JSON plus "v": 1, written at creation and at
//     every state change; output counters in it are as of that moment.
//     While the task is live the file is one 4 KiB page rewritten in place
//     by a single write (the document padded with spaces), which a crash of
//     this process cannot tear; after the task ends, and for documents over
//     a page, it is replaced atomically (temporary file, then rename).
//   - ID.log: the output, append-only, written as it arrives (one write(2)
//     per Write, per 256 KiB for larger ones), without fsync. It is a sequence of records: an
//     8-byte header (magic 0xA7, stream 1=stdout 2=stderr, uint16 payload
//     length, CRC-32C of the header's first four bytes and the payload,
//     little endian) then 1..65528 payload bytes, so one record is at most
//     64 KiB and longer writes become several records. An offset is a byte
//     position in this file at a record start; 0 is the beginning.
//
// # Crashes
//
// What Write returned for is in the OS, so a crash of this process (or of
// the VM, or the agent) loses no output already received; a power loss may,
// and is out of scope. Open scans each log from the size its metadata last
// recorded, stops at the first record that is short, has a bad header or a
// bad checksum, and truncates the file there: a torn last record vanishes,
// and the counters are recomputed. Tasks found queued or running are marked
// lost, ended at their log's last modification. Leftover temporary files,
// empty metadata files (a crash between creating a task's file and its
// first write) and logs without metadata are deleted.
//
// # Limits
//
// Retention keeps at most Options.MaxTasks tasks and Options.MaxBytes of
// logs, dropping finished tasks that ended first; live tasks are never
// dropped. One task's log is bounded by Options.MaxTaskBytes, live or not:
// past it a note is written to its stderr, Task.Output.Truncated is set, and
// further output is discarded (counted as dropped) without slowing or
// ending the task. A failed log write (a full disk) does not end the task or lose
// its state: the log is cut back to its last whole record, the bytes are
// counted as dropped, and the error is kept in Task.Output.Error.
package tasks
