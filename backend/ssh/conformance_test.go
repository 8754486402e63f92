package ssh

import (
	"sync/atomic"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// TestConformance is the ssh backend's one entry into berth's suite, its
// table of configurations. The primary one: one private sshd, a backend (a
// connection) per group of the suite, and the ssh-only tests (each with its
// own sshd where it needs one) as the Internal group. The secondary one,
// "jump", reaches the target only through a jump host: an sshd that
// forwards to the target and nowhere else, every backend on its own
// tunnel. It runs what the route changes: the Process and Background
// groups and the kill of escaped background processes; the rest exercise
// nothing the route changes and run on the direct connection only.
func TestConformance(t *testing.T) {
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		s := sshenv.Start(t)
		return backendtest.Target{New: func(t testing.TB) backend.Backend {
			return newTestBackend(t, testOptions(s, nil))
		}, Options: backendtest.Options{
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
					{"CheckpointCarriesFiles", testCheckpointCarriesFiles},
					{"CheckpointHomeRelativeCwd", testCheckpointHomeRelativeCwd},
					{"CheckpointRemovalLeavesNothing", testCheckpointRemovalLeavesNothing},
					{"CheckpointHostileNames", testCheckpointHostileNames},
					{"CheckpointRefusesHome", testCheckpointRefusesHome},
					{"CheckpointOtherCp", testCheckpointOtherCp},
					{"CheckpointInterrupted", testCheckpointInterrupted},
				} {
					t.Run(c.name, c.fn)
				}
			},
		}}
	}}, backendtest.Config{
		Name:   "jump",
		Groups: []string{"Process", "Background", "Hardening/BackgroundKillKillsEscapedProcesses"},
		Setup: func(t *testing.T) backendtest.Target {
			s := sshenv.Start(t)
			j := sshenv.Start(t, sshenv.WithForwarding(s.Addr()))
			if err := j.AuthorizeKey(s.Signer.PublicKey()); err != nil {
				t.Fatal(err)
			}
			var built atomic.Bool
			t.Cleanup(func() {
				if n := accepted(j); n == 0 && built.Load() {
					t.Error("the jump host logged no login")
				}
			})
			return backendtest.Target{New: func(tb testing.TB) backend.Backend {
				built.Store(true)
				opts := testOptions(s, nil)
				mustSet(&opts.Config, keyProxyJump, j.Addr())
				b := newTestBackend(tb, opts)
				if b.t.via == nil {
					tb.Fatal("no jump host on the route")
				}
				return b
			}}
		},
	})
}
