package redistest

import (
	"os/exec"
	"syscall"
)

// detach keeps a server from outliving, or holding on to, the test process
// that starts it: the server is killed when its parent thread dies, and
// descriptors this process inherited without close-on-exec (a fuzz worker
// inherits its pipes to the fuzz coordinator) are not passed on to it, or
// a crashed worker's server would keep the coordinator waiting forever.
func detach(cmd *exec.Cmd) {
	for fd := 3; fd < 1024; fd++ {
		syscall.CloseOnExec(fd)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
