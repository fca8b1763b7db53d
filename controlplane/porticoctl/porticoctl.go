// Package porticoctl is the operator CLI's command tree. Each command
// group lives in a file of its own; main only executes Root. The config
// commands (get, apply, delete, export, versions, rollback, rollouts,
// nodes) speak the admin API through adminclient, with make run's
// defaults: https://localhost:18080, .run/admin-token, .run/pki/ca.crt.
package porticoctl

import (
	"io"

	"github.com/spf13/cobra"
)

// Root returns the porticoctl command tree writing to out.
func Root(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "porticoctl",
		Short:         "Operate a Portico platform",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.AddCommand(certsCommand())
	// The config commands share one set of connection flags.
	c := &conn{}
	for _, cmd := range []*cobra.Command{getCommand(c), applyCommand(c), deleteCommand(c), exportCommand(c),
		versionsCommand(c), rollbackCommand(c), rolloutsCommand(c), nodesCommand(c)} {
		c.flags(cmd)
		root.AddCommand(cmd)
	}
	return root
}
