package ssh

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/backendtest"
	"github.com/a55dbaac/berth/internal/testenv/sshenv"
)

// TestConformance is the ssh backend's one entry into berth's suite, its
// table of configurations. The primary one: one private sshd, a backend (a
// connection) per group of the suite, all working in one workspace on the
// host (terminal.cwd, which a checkpoint copies: the Fork group forks it),
// and the ssh-only tests (each with its own sshd where it needs one) as
// the Internal group. The secondary one, "jump", reaches the target only
// through a jump host: an sshd that forwards to the target and nowhere
// else, every backend on its own tunnel. It runs what the route changes:
// the Process and Background groups, the kill of escaped background
// processes and, in the full tier, the Fork group; the rest exercise
// nothing the route changes and run on the direct connection only. The
// full tier's "home" keeps the default terminal.cwd, the remote home,
// which berth refuses to copy: the Fork group checks the refusal.
func TestConformance(t *testing.T) {
	backendtest.Run(t, Name, backendtest.Config{Setup: func(t *testing.T) backendtest.Target {
		s := sshenv.Start(t)
		ws := t.TempDir()
		return backendtest.Target{New: func(t testing.TB) backend.Backend {
			return newTestBackend(t, wsTestOptions(s, ws))
		}, NewFrom: func(t testing.TB, o backend.Options) backend.Backend {
			return newTestBackend(t, fromOptions(wsTestOptions(s, ws), o))
		}, Checkpoints: targetAdmin{wsTestOptions(s, ws)}, Options: backendtest.Options{
			// The workspace is what a checkpoint copies.
			CheckpointDir: ws,
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
		Groups: jumpGroups(),
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
			ws := t.TempDir()
			opts := wsTestOptions(s, ws)
			mustSet(&opts.Config, keyProxyJump, j.Addr())
			viaJump := func(tb testing.TB, opts backend.Options) backend.Backend {
				built.Store(true)
				b := newTestBackend(tb, opts)
				if b.t.via == nil {
					tb.Fatal("no jump host on the route")
				}
				return b
			}
			return backendtest.Target{New: func(tb testing.TB) backend.Backend {
				return viaJump(tb, opts)
			}, NewFrom: func(tb testing.TB, o backend.Options) backend.Backend {
				return viaJump(tb, fromOptions(opts, o))
			}, Checkpoints: targetAdmin{opts}, Options: backendtest.Options{CheckpointDir: ws}}
		},
	}, backendtest.Config{
		// The default terminal.cwd, the remote home: berth copies no home,
		// and the Fork group checks that a fork and a checkpoint say so.
		Name:   "home",
		Groups: []string{"Fork"},
		Full:   true,
		Setup: func(t *testing.T) backendtest.Target {
			s := sshenv.Start(t)
			return backendtest.Target{New: func(t testing.TB) backend.Backend {
				return newTestBackend(t, testOptions(s, nil))
			}, NewFrom: func(t testing.TB, o backend.Options) backend.Backend {
				return newTestBackend(t, fromOptions(testOptions(s, nil), o))
			}, Checkpoints: targetAdmin{testOptions(s, nil)}}
		},
	})
}

// jumpGroups are what the jump configuration runs: what the route
// changes, and in the full tier the Fork group too (its copies are
// commands on the route, and removing a checkpoint connects through it
// again), which a direct connection runs in every tier.
func jumpGroups() []string {
	g := []string{"Process", "Background", "Hardening/BackgroundKillKillsEscapedProcesses"}
	if os.Getenv(backendtest.TierVar) == "all" {
		g = append(g, "Fork")
	}
	return g
}

// wsTestOptions are the options of an environment on s that works in ws,
// a workspace on the host, which a checkpoint copies.
func wsTestOptions(s *sshenv.Server, ws string) backend.Options {
	opts := testOptions(s, nil)
	opts.Config.Cwd = ws
	return opts
}

// fromOptions are base with what the Fork group's manager gives (o): the
// key, the checkpoint to start from, berth's home and progress.
func fromOptions(base, o backend.Options) backend.Options {
	base.Key, base.From, base.Home, base.Progress = o.Key, o.From, o.Home, o.Progress
	return base
}

// targetAdmin removes checkpoints on a configuration's host, with its
// settings, whatever options the Fork group's manager gives (its
// terminal settings name no host).
type targetAdmin struct{ opts backend.Options }

func (a targetAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	return checkpointAdmin{}.Remove(ctx, fromOptions(a.opts, backend.Options{Key: opts.Key, Home: opts.Home}), cp)
}
