package client

// PacerSizes returns how many paths, hosts and policies tr's pacer keeps.
func PacerSizes(tr *Transport) (paths, hosts, policies int) {
	tr.init()
	tr.pace.mu.Lock()
	defer tr.pace.mu.Unlock()
	return len(tr.pace.byPath), len(tr.pace.byHost), len(tr.pace.policies)
}
