package transport

import "testing"

// TestAdmitFromShare: one client address holds at most a quarter of the
// in-flight body budget (at least one whole body) while it holds anything
// else, so one address cannot starve the others (issue 38, item 3); the
// whole budget still binds every address together.
func TestAdmitFromShare(t *testing.T) {
	s := NewService(Config{MaxInFlightBodyBytes: 128 << 20})
	const share = 32 << 20
	if !s.admitFrom("10.0.0.1", share, 0) {
		t.Fatal("an address is admitted up to its share")
	}
	if s.admitFrom("10.0.0.1", 1, 0) {
		t.Fatal("a second body of an address at its share is admitted")
	}
	if !s.admitFrom("10.0.0.1", 1, share) {
		t.Fatal("a body growing alone (the address holds nothing else) is refused")
	}
	if !s.admitFrom("10.0.0.2", 40<<20, 0) {
		t.Fatal("another address holding nothing is refused")
	}
	if s.admitFrom("10.0.0.3", 60<<20, 0) {
		t.Fatal("the whole budget does not bind")
	}
	if got := s.InFlightBodyBytes(); got != share+1+40<<20 {
		t.Fatalf("budget in use %d after the refusals", got)
	}
	s.holdFrom("10.0.0.1", -(share + 1))
	s.inFlight.Add(-(share + 1))
	if !s.admitFrom("10.0.0.1", 1, 0) {
		t.Fatal("an address that released its bodies is refused")
	}
}
