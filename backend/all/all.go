// Package all registers every backend built into berth. A Go program that
// drives berth through its registry (manager.New, berth's own commands)
// imports it once:
//
//	import _ "github.com/a55dbaac/berth/backend/all"
//
// Adding a backend to berth means adding its package here and nowhere else.
package all

import (
	// The built-in backends register themselves in their init functions.
	_ "github.com/a55dbaac/berth/backend/daytona"
	_ "github.com/a55dbaac/berth/backend/docker"
	_ "github.com/a55dbaac/berth/backend/kubernetes"
	_ "github.com/a55dbaac/berth/backend/local"
	_ "github.com/a55dbaac/berth/backend/modal"
	_ "github.com/a55dbaac/berth/backend/singularity"
	_ "github.com/a55dbaac/berth/backend/ssh"
)
