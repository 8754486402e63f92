package local_test

import (
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backend/local"
	"github.com/a55dbaac/berth/backendtest"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		be, err := local.New(backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}, backendtest.Options{Scratch: t.TempDir()})
}
