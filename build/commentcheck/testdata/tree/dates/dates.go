// Package dates has a date in each comment.
package dates

// Measured 2026-12-06 on a quiet machine.
const A = 1

/*
B was 10 ms in Dec 2026,
and 12 ms on December 6, 2026.
*/
const B = 2

// C: 6 Dec. 2026.
// D: in 2025.
// E: as of 2024, it was so.
// F: 2026/12.
const C = 3
