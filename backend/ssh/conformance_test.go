package ssh

import (
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
