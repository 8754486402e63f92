package scan

import "testing"

// TestChecksNameRealRules: every rule id beside a checker is a rule, and
// every rule is reported by some checker or by the scanner itself, so the
// table and the rule list cannot drift apart.
func TestChecksNameRealRules(t *testing.T) {
	reported := map[string]bool{}
	for _, id := range scannerRules {
		if _, ok := LookupRule(id); !ok {
			t.Errorf("scannerRules names %q, which is no rule", id)
		}
		reported[id] = true
	}
	for name, c := range checks {
		if c.fn == nil {
			t.Errorf("check %q has no checker", name)
		}
		for _, id := range c.rules {
			if _, ok := LookupRule(id); !ok {
				t.Errorf("check %q names %q, which is no rule", name, id)
			}
			reported[id] = true
		}
	}
	for _, r := range Rules() {
		if !reported[r.ID] {
			t.Errorf("rule %s is reported by no checker and not by the scanner", r.ID)
		}
	}
	for _, p := range prefixChecks {
		if _, ok := checks[p.name]; !ok {
			t.Errorf("prefix %q shares the check of %q, which has none", p.prefix, p.name)
		}
	}
}
