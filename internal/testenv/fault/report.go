package fault

// TB is the part of testing.TB that Report uses.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Logf(format string, args ...any)
}

// Report prints the seed of src again, with how to replay it, when the test
// fails: "modalfake: fault seed 12345 (replay with BERTH_FAKE_SEED=12345)".
// A run that drew no decision says so: its failure does not hang on the
// seed. name prefixes the line (the fake's name).
func Report(t TB, name string, src *Source) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if !src.Drawn() {
			t.Logf("%s: %s; no fault was drawn from it, so the failure does not depend on it", name, src)
			return
		}
		t.Logf("%s: %s", name, src)
	})
}
