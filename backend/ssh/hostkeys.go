package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyChangedError reports that a host presented a key different from the
// one pinned in known_hosts: either the host was re-keyed or someone is in
// the middle. The connection is refused.
type HostKeyChangedError struct {
	Host    string                // known_hosts form: "host" or "[host]:port"
	Offered gossh.PublicKey       // the key the server presented
	Known   []knownhosts.KnownKey // the pinned keys for Host
}

func (e *HostKeyChangedError) Error() string {
	known := make([]string, 0, len(e.Known))
	file := ""
	for _, k := range e.Known {
		known = append(known, fmt.Sprintf("%s %s (%s:%d)", k.Key.Type(), gossh.FingerprintSHA256(k.Key), k.Filename, k.Line))
		if file == "" {
			file = k.Filename
		}
	}
	return fmt.Sprintf("ssh backend: HOST KEY FOR %s HAS CHANGED: the server offered %s %s but known_hosts has %s; "+
		"someone may be intercepting the connection, or the host was re-keyed. If you know it was re-keyed, remove the old entry "+
		"with: ssh-keygen -R '%s' -f %s",
		e.Host, e.Offered.Type(), gossh.FingerprintSHA256(e.Offered), strings.Join(known, ", "), e.Host, file)
}

// HostKeyUnknownError reports an unknown host when StrictHostKeyChecking yes
// in ~/.ssh/config forbids recording new hosts.
type HostKeyUnknownError struct {
	Host    string
	Offered gossh.PublicKey
	File    string
}

func (e *HostKeyUnknownError) Error() string {
	return fmt.Sprintf("ssh backend: host %s is not in %s and StrictHostKeyChecking is yes (server key %s %s); "+
		"add it with: ssh-keyscan -p PORT HOST >> %s",
		e.Host, e.File, e.Offered.Type(), gossh.FingerprintSHA256(e.Offered), e.File)
}

// knownHostsMu serialises appends to known_hosts files within this process.
var knownHostsMu sync.Mutex

// hostKeyChecker implements accept-new host key checking against OpenSSH
// known_hosts files. One is made per dial.
type hostKeyChecker struct {
	files         []string // the first one receives new entries
	hash          bool     // write hashed host names (HashKnownHosts yes)
	refuseUnknown bool     // StrictHostKeyChecking yes
	log           *slog.Logger

	db       gossh.HostKeyCallback // nil when no file exists yet
	err      error                 // the last verdict that refused a key
	recorded bool                  // a new host was appended
	key      gossh.PublicKey       // the key the server presented
}

func newHostKeyChecker(files []string, hash, refuseUnknown bool, log *slog.Logger) (*hostKeyChecker, error) {
	h := &hostKeyChecker{files: files, hash: hash, refuseUnknown: refuseUnknown, log: log}
	var existing []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	if len(existing) > 0 {
		db, err := knownhosts.New(existing...)
		if err != nil {
			return nil, fmt.Errorf("ssh backend: read known hosts: %w", err)
		}
		h.db = db
	}
	return h, nil
}

var (
	probeKeyOnce sync.Once
	probeKey     gossh.PublicKey
)

// knownKeyAlgorithms returns the host key algorithms to offer for addr: the
// types of the keys pinned for it first, so the handshake asks the server
// for a key we can verify (as OpenSSH does) instead of reporting a
// "changed" key of another type. Nil (the library default) for new hosts.
func (h *hostKeyChecker) knownKeyAlgorithms(addr string) []string {
	if h.db == nil {
		return nil
	}
	probeKeyOnce.Do(func() {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err == nil {
			probeKey, _ = gossh.NewPublicKey(pub)
		}
	})
	if probeKey == nil {
		return nil
	}
	err := h.db(addr, &net.TCPAddr{IP: net.IPv4zero}, probeKey)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case gossh.KeyAlgoRSA:
			add(gossh.KeyAlgoRSASHA512)
			add(gossh.KeyAlgoRSASHA256)
			add(gossh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	// The rest stay acceptable, after the pinned types: a server that no
	// longer has any pinned type is then reported as a changed key rather
	// than failing with "no common algorithm".
	for _, a := range gossh.SupportedAlgorithms().HostKeys {
		add(a)
	}
	return algos
}

// check is the ssh.HostKeyCallback.
func (h *hostKeyChecker) check(hostname string, remote net.Addr, key gossh.PublicKey) error {
	h.key = key
	var err error = &knownhosts.KeyError{}
	if h.db != nil {
		err = h.db(hostname, remote, key)
	}
	if err == nil {
		return nil
	}
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &ke) && len(ke.Want) > 0:
		h.err = &HostKeyChangedError{Host: knownhosts.Normalize(hostname), Offered: key, Known: ke.Want}
	case errors.As(err, &ke):
		if h.refuseUnknown {
			h.err = &HostKeyUnknownError{Host: knownhosts.Normalize(hostname), Offered: key, File: h.files[0]}
			break
		}
		if werr := appendKnownHost(h.files[0], hostname, key, h.hash); werr != nil {
			h.err = werr
			break
		}
		h.recorded = true
		h.log.Info("ssh: new host key accepted and recorded",
			"host", knownhosts.Normalize(hostname), "key", key.Type()+" "+gossh.FingerprintSHA256(key), "file", h.files[0])
		return nil
	case errors.As(err, &re):
		h.err = fmt.Errorf("ssh backend: host key %s %s of %s is marked revoked in %s:%d",
			key.Type(), gossh.FingerprintSHA256(key), knownhosts.Normalize(hostname), re.Revoked.Filename, re.Revoked.Line)
	default:
		h.err = fmt.Errorf("ssh backend: check host key of %s: %w", hostname, err)
	}
	return h.err
}

// appendKnownHost records key for hostname ("host:port") in path, creating
// the file (0600) and its directory (0700) when missing. Non-22 ports use
// the "[host]:port" form; hash writes an OpenSSH "|1|salt|hash" entry.
func appendKnownHost(path, hostname string, key gossh.PublicKey, hash bool) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("ssh backend: record host key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("ssh backend: record host key: %w", err)
	}
	defer f.Close()
	prefix := ""
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			prefix = "\n"
		}
	}
	entry := knownhosts.Normalize(hostname)
	if hash {
		entry = knownhosts.HashHostname(entry)
	}
	line := prefix + entry + " " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(key))) + "\n"
	if _, err := f.WriteString(line); err != nil {
		return fmt.Errorf("ssh backend: record host key in %s: %w", path, err)
	}
	return nil
}
