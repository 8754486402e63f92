// Package randhex makes random hexadecimal strings for ids and framing
// markers that nothing else may produce by accident.
package randhex

import (
	"crypto/rand"
	"encoding/hex"
)

// String returns n random bytes from crypto/rand as 2n hex digits.
// (crypto/rand.Read does not fail; the program aborts if the system's
// randomness cannot be read.)
func String(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
