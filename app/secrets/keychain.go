package secrets

import (
	"errors"
	"time"

	"github.com/zalando/go-keyring"
)

// KeychainService is the service name Airlock's items have in the OS
// keychain (the account is the secret's name).
const KeychainService = "airlock"

// keychainTimeout bounds one keychain call: a Secret Service that waits for
// an unlock prompt nobody sees must not hang the service.
const keychainTimeout = 20 * time.Second

// OSKeychain is the OS credential store through go-keyring: Secret Service
// over D-Bus on Linux, the Keychain on macOS, the Credential Manager on
// Windows.
type OSKeychain struct{}

// Get returns the value kept for name.
func (OSKeychain) Get(name string) (string, error) {
	got := make(chan string, 1)
	err := bounded(func() error {
		v, err := keyring.Get(KeychainService, name)
		got <- v
		return err
	})
	if err != nil {
		return "", err
	}
	return <-got, nil
}

// Set keeps value for name.
func (OSKeychain) Set(name, value string) error {
	return bounded(func() error { return keyring.Set(KeychainService, name, value) })
}

// Delete removes name; a missing item is not an error.
func (OSKeychain) Delete(name string) error {
	return bounded(func() error {
		if err := keyring.Delete(KeychainService, name); err != nil && !errors.Is(err, keyring.ErrNotFound) {
			return err
		}
		return nil
	})
}

func bounded(f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(keychainTimeout):
		return errors.New("the OS keychain did not answer in time (is it locked?)")
	}
}
