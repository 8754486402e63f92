package backend

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestExitStatusFirstSetWins: the zero value waits; the first Set is what
// Wait returns, to every waiter, and later Sets change nothing.
func TestExitStatusFirstSetWins(t *testing.T) {
	var s ExitStatus
	if s.Exited() {
		t.Fatal("a new status is exited")
	}
	select {
	case <-s.Done():
		t.Fatal("Done closed before Set")
	default:
	}
	boom := errors.New("boom")
	var wg sync.WaitGroup
	got := make([]int, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := s.Wait()
			if err != boom {
				t.Errorf("waiter %d: err %v, want boom", i, err)
			}
			got[i] = code
		}()
	}
	if !s.Set(3, boom) {
		t.Fatal("the first Set reports it did not set")
	}
	if s.Set(4, nil) {
		t.Fatal("a second Set reports it set")
	}
	wg.Wait()
	for i, code := range got {
		if code != 3 {
			t.Errorf("waiter %d: code %d, want 3", i, code)
		}
	}
	if !s.Exited() {
		t.Error("Exited false after Set")
	}
	select {
	case <-s.Done():
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("Done not closed after Set")
	}
}

// TestExitStatusConcurrentSets: of sets racing, exactly one sets, and Wait
// returns its values (run with -race).
func TestExitStatusConcurrentSets(t *testing.T) {
	var s ExitStatus
	var wg sync.WaitGroup
	winners := make(chan int, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.Set(i, nil) {
				winners <- i
			}
		}()
	}
	wg.Wait()
	close(winners)
	var won []int
	for i := range winners {
		won = append(won, i)
	}
	if len(won) != 1 {
		t.Fatalf("%d sets won, want 1", len(won))
	}
	if code, _ := s.Wait(); code != won[0] {
		t.Errorf("Wait code %d, the winner set %d", code, won[0])
	}
}
