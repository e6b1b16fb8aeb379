// Package good has comments the check accepts.
package good

// Port 2049 is NFS's; 2048 bytes fit in a page in 2048-byte steps.
// Times are RFC 3339; a record is 1..65528 bytes; Go 1.26 or later.
// The version v2024.1 and the range 2000-3000 are not dates, nor is
// CVE-2024-1234 or issue 2025 on its own.
const Good = 1
