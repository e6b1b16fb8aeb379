package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// CA file names inside the folder LoadCA is given.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// Lifetimes of the certificates the CA makes.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 7 * 24 * time.Hour
	// maxLeaves bounds the leaf cache; past it the cache starts over.
	maxLeaves = 1024
)

// CA is the per-installation certificate authority the gate uses to
// terminate the guest's TLS for hosts that have a secret. Its certificate is
// installed in the guest's trust store; its key never leaves the host (a
// 0600 file in the state folder). Leaf certificates are made on the fly
// for each host and cached.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // shared by every leaf of this process
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadCA reads the CA from dir (CACertFile, CAKeyFile), creating a new
// ECDSA P-256 CA there when neither exists. A key readable by others is
// refused (on Unix), as is a key that does not belong to the certificate.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist) {
		return createCA(dir)
	}
	if cerr != nil || kerr != nil {
		return nil, fmt.Errorf("egress: CA in %s: %w (remove both %s and %s to make a new one)", dir, errors.Join(cerr, kerr), CACertFile, CAKeyFile)
	}
	if runtime.GOOS != "windows" {
		if fi, err := os.Stat(keyPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("egress: CA key %s is readable by others (mode %v): chmod 600 it, or remove both files to make a new CA", keyPath, fi.Mode().Perm())
		}
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("egress: CA: no PEM block in the certificate or key file")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("egress: CA key does not belong to the CA certificate")
	}
	return newCA(cert, pem.EncodeToMemory(cb), key)
}

func newCA(cert *x509.Certificate, certPEM []byte, key *ecdsa.PrivateKey) (*CA, error) {
	lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certPEM: certPEM, key: key, leafKey: lk, now: time.Now, leaves: map[string]*tls.Certificate{}}, nil
}

// createCA makes a new CA and writes it to dir: the key first, 0600, then
// the certificate, each atomically.
func createCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Airlock egress CA (" + host + ")", Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: create CA: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress: CA folder: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600, atomicfile.Synced); err != nil {
		return nil, fmt.Errorf("egress: write CA key: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, CACertFile), certPEM, 0o600, atomicfile.Synced); err != nil {
		return nil, fmt.Errorf("egress: write CA certificate: %w", err)
	}
	return newCA(cert, certPEM, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// CertPEM returns the CA certificate (never the key) in PEM form: what the
// guest trusts.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Certificate returns the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// leaf returns a certificate for host (a normalised name or address text),
// made on first use and cached until it is close to expiry.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && now.Add(time.Hour).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("egress: leaf certificate for %s: %w", host, err)
	}
	parsed, _ := x509.ParseCertificate(der)
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: ca.leafKey, Leaf: parsed}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}
