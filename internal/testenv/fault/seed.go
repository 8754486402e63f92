package fault

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SeedEnv names the variable that replays a run: BERTH_FAKE_SEED=<n> gives
// every fake of the run the seed n, the one a failed run printed.
const SeedEnv = "BERTH_FAKE_SEED"

// SourceFromEnv returns a Source seeded from BERTH_FAKE_SEED, or from a new
// random seed when the variable is unset or empty. A value that is not a
// decimal number is an error naming it.
func SourceFromEnv() (*Source, error) {
	v := strings.TrimSpace(os.Getenv(SeedEnv))
	if v == "" {
		return NewSource(RandomSeed()), nil
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("fault: %s=%q is not a seed: give the decimal number a failed run printed, or unset it for a random seed", SeedEnv, v)
	}
	s := NewSource(seed)
	s.fromEnv = true
	return s, nil
}

// RandomSeed returns a new seed from the operating system's random source,
// from 1 to 2^31-1 (short enough to copy from a log by hand).
func RandomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint64(b[:])%(1<<31-1) + 1
}
