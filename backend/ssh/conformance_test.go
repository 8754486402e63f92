package ssh

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// TestConformance is the ssh backend's one entry into berth's suite: one
// private sshd, a fresh backend (a fresh connection) per test, and the
// ssh-only tests (each with its own sshd where it needs one) as the
// Internal group.
func TestConformance(t *testing.T) {
	s := sshenv.Start(t)
	backendtest.Run(t, func(t testing.TB) backend.Backend {
		return newTestBackend(t, testOptions(s, nil))
	}, backendtest.Options{
		Internal: func(t *testing.T) {
			for _, c := range []struct {
				name string
				fn   func(*testing.T)
			}{
				{"LatencyReport", testLatencyReport},
				{"SessionSurvivesDroppedConnection", testSessionSurvivesDroppedConnection},
				{"SessionShellKilledBeforeDrop", testSessionShellKilledBeforeDrop},
				{"WriteFileSFTP", testWriteFileSFTP},
				{"WriteFileSFTPRefusals", testWriteFileSFTPRefusals},
				{"WriteFileWithoutSFTP", testWriteFileWithoutSFTP},
				{"FilesWriteUsesSFTP", testFilesWriteUsesSFTP},
				{"WriteFileAfterReconnect", testWriteFileAfterReconnect},
				{"RunCommand", testRunCommand},
				{"UnknownHostAcceptedAndRecorded", testUnknownHostAcceptedAndRecorded},
				{"UnknownHostRecordedHashed", testUnknownHostRecordedHashed},
				{"ChangedHostKeyRefused", testChangedHostKeyRefused},
				{"AgentAuthentication", testAgentAuthentication},
				{"DefaultIdentityFile", testDefaultIdentityFile},
				{"SSHConfigAlias", testSSHConfigAlias},
				{"Unreachable", testUnreachable},
				{"Doctor", testDoctor},
				{"ReconnectAfterDrop", testReconnectAfterDrop},
				{"KeepAliveDetectsDeadLink", testKeepAliveDetectsDeadLink},
				{"KillRemoteProcessGroup", testKillRemoteProcessGroup},
				{"LargeOutputBoundedMemory", testLargeOutputBoundedMemory},
				{"ManyChannelsBeyondMaxSessions", testManyChannelsBeyondMaxSessions},
				{"SessionEnv", testSessionEnv},
				{"ProxyJumpOneHop", testProxyJumpOneHop},
				{"ProxyJumpTwoHops", testProxyJumpTwoHops},
				{"ProxyJumpFromSSHConfig", testProxyJumpFromSSHConfig},
				{"ProxyCommand", testProxyCommand},
			} {
				t.Run(c.name, c.fn)
			}
		},
	})
}

// TestConformanceThroughJumpHost runs the Process and Background groups of
// the suite, and the kill of escaped background processes, with the target
// reached only through a jump host: an sshd that forwards to the target and
// nowhere else, every backend on its own tunnel. The other tests exercise
// nothing the route changes and run on the direct connection only
// (TestConformance), to keep the run short.
func TestConformanceThroughJumpHost(t *testing.T) {
	s := sshenv.Start(t)
	j := sshenv.Start(t, sshenv.WithForwarding(s.Addr()))
	if err := j.AuthorizeKey(s.Signer.PublicKey()); err != nil {
		t.Fatal(err)
	}
	var built atomic.Bool
	backendtest.Run(t, func(tb testing.TB) backend.Backend {
		built.Store(true)
		opts := testOptions(s, nil)
		mustSet(&opts.Config, keyProxyJump, j.Addr())
		b := newTestBackend(tb, opts)
		if b.t.via == nil {
			tb.Fatal("no jump host on the route")
		}
		return b
	}, backendtest.Options{Only: func(name string) bool {
		return strings.HasPrefix(name, "Process/") || strings.HasPrefix(name, "Background/") ||
			name == "Hardening/BackgroundKillKillsEscapedProcesses"
	}})
	if n := accepted(j); n == 0 && built.Load() {
		t.Fatal("the jump host logged no login")
	}
}
