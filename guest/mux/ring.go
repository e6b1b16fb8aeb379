package mux

// ring holds a stream's unread bytes: n bytes from buf[head], wrapping
// around the end, so that the receive loop never moves unread bytes to make
// room. The receive loop adds (space, commit), readers take; both under the
// stream's lock, but the receive loop fills the space it got without it.
type ring struct {
	buf  []byte
	head int
	n    int
}

// take moves up to len(p) unread bytes into p.
func (r *ring) take(p []byte) int {
	if r.n == 0 {
		return 0
	}
	k := copy(p, r.buf[r.head:min(r.head+r.n, len(r.buf))])
	if k < len(p) && k < r.n {
		k += copy(p[k:], r.buf[:r.n-k])
	}
	r.head = (r.head + k) % len(r.buf)
	r.n -= k
	return k
}

// space returns room for n bytes after the unread ones: a, and b where it
// wraps around. The buffer grows as needed, doubling, to at most limit or
// what n needs. The room stays valid until the next space or reset.
func (r *ring) space(n, limit int) (a, b []byte) {
	if r.n == 0 {
		r.head = 0 // start over where the cache is warm
	}
	if len(r.buf)-r.n < n {
		size := min(max(2*len(r.buf), r.n+n, 64<<10), max(limit, r.n+n))
		nb := make([]byte, size)
		m := r.take(nb)
		r.buf, r.head, r.n = nb, 0, m
	}
	tail := r.head + r.n
	if tail >= len(r.buf) {
		tail -= len(r.buf)
		return r.buf[tail : tail+n], nil
	}
	a = r.buf[tail:min(tail+n, len(r.buf))]
	return a, r.buf[:n-len(a)]
}

// commit adds n bytes written to the space returned last.
func (r *ring) commit(n int) { r.n += n }
