package egress

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"sync"
)

// credentials maps the proxy credential of each task to the task.
// Credentials identify tasks, they do not authorise: every task in a guest
// shares one policy.
type credentials struct {
	required bool // refuse connections that carry no credential

	mu     sync.Mutex
	byUser map[string]credential // user -> credential
	byTask map[string]string     // task -> user
}

type credential struct{ task, pass string }

func newCredentials(required bool) *credentials {
	return &credentials{required: required, byUser: map[string]credential{}, byTask: map[string]string{}}
}

// Credentials returns the proxy credential of a task, creating it on first
// use: put it in the task's proxy URL (http://USER:PASS@127.0.0.1:3128).
// Both parts are URL-safe.
func (g *Gate) Credentials(task string) (user, pass string) {
	cs := g.creds
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if u, ok := cs.byTask[task]; ok {
		return u, cs.byUser[u].pass
	}
	user, pass = "t"+randomHex(8), randomHex(16)
	cs.byTask[task] = user
	cs.byUser[user] = credential{task: task, pass: pass}
	return user, pass
}

// Revoke forgets a task's credential: later connections using it are
// refused with auth-failed. Established connections are not cut.
func (g *Gate) Revoke(task string) {
	cs := g.creds
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if u, ok := cs.byTask[task]; ok {
		delete(cs.byTask, task)
		delete(cs.byUser, u)
	}
}

// authenticate maps a credential to its task. present says whether one was
// given at all.
func (cs *credentials) authenticate(user, pass string, present bool) (task string, ok bool) {
	if !present {
		return "", !cs.required
	}
	cs.mu.Lock()
	c, found := cs.byUser[user]
	cs.mu.Unlock()
	if !found {
		subtle.ConstantTimeCompare([]byte(pass), []byte(pass)) // same work either way
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(pass), []byte(c.pass)) != 1 {
		return "", false
	}
	return c.task, true
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}
