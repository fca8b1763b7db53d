package porticoctl

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/portico-io/portico/controlplane/rollout"
)

// The operational commands: versions, rollback, rollouts, nodes.

func versionsCommand(c *conn) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "List config versions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			vs, err := cl.Versions(cmd.Context(), limit)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tCREATED\tAUTHOR\tREASON")
			for _, v := range vs {
				reason := v.Reason
				if v.RollbackOf != nil {
					reason = strings.TrimSpace(fmt.Sprintf("rollback to %d %s", *v.RollbackOf, reason))
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", v.Version, v.CreatedAt.Format(time.RFC3339), v.Author, reason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many")
	return cmd
}

func rollbackCommand(c *conn) *cobra.Command {
	var to int64
	cmd := &cobra.Command{
		Use:   "rollback --to N",
		Short: "Make a new config version whose content equals version N",
		Long: `rollback makes a new version equal to version N. Consumers, API keys and
revocations keep their current content: undoing a bad route never
un-revokes a token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to <= 0 {
				return fmt.Errorf("--to N is required")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.Rollback(cmd.Context(), to)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rolled back to version %d as version %d\n", to, v)
			return nil
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "the version whose content to restore")
	return cmd
}

func rolloutsCommand(c *conn) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "rollouts [list | get ID | start ... | abort ID]",
		Short: "Follow, start and abort wave rollouts",
		Args:  cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVarP(&output, "output", "o", "table", "table, yaml or json")
	list := &cobra.Command{
		Use:   "list",
		Short: "List rollouts, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			items, _, err := listItems[rollout.Rollout](cmd, c, "/config/rollouts")
			if err != nil {
				return err
			}
			return printRollouts(cmd.OutOrStdout(), output, items...)
		},
	}
	cmd.RunE = list.RunE
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show one rollout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return rolloutCall(cmd, c, output, "GET", args[0], "")
		},
	}
	abort := &cobra.Command{
		Use:   "abort ID",
		Short: "Abort a running rollout (nodes go back to its baseline)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return rolloutCall(cmd, c, output, "POST", args[0], "/abort")
		},
	}
	var (
		target   int64
		percents []int
		groups   []string
		bake     time.Duration
		maxNack  float64
		minNodes int
	)
	start := &cobra.Command{
		Use:   "start (--percent P,... | --groups G,...) [--target N] [--bake D] [--max-nack-ratio R]",
		Short: "Roll a version (default: the newest) out in waves",
		Example: `  porticoctl rollouts start --percent 10,50,100 --bake 2m --max-nack-ratio 0.1
  porticoctl rollouts start --groups canary,default --target 42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := rollout.Spec{TargetVersion: target, BakeSeconds: int(bake / time.Second), MaxNackRatio: maxNack, MinNodes: minNodes}
			for _, p := range percents {
				s.Waves = append(s.Waves, rollout.Wave{Percent: p})
			}
			for _, g := range groups {
				s.Waves = append(s.Waves, rollout.Wave{Groups: strings.Split(g, "+")})
			}
			if len(s.Waves) == 0 {
				return fmt.Errorf("give the waves: --percent 10,50,100 or --groups canary,default")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			raw, err := cl.Post(cmd.Context(), "/config/rollouts", s)
			if err != nil {
				return err
			}
			var ro rollout.Rollout
			if err := json.Unmarshal(raw, &ro); err != nil {
				return err
			}
			return printRollouts(cmd.OutOrStdout(), output, ro)
		},
	}
	start.Flags().Int64Var(&target, "target", 0, "version to roll out (default: the newest)")
	start.Flags().IntSliceVar(&percents, "percent", nil, "waves as percentages of the gateways, e.g. 10,50,100")
	start.Flags().StringSliceVar(&groups, "groups", nil, "waves as node groups, one per wave (a+b: two groups in one wave)")
	start.Flags().DurationVar(&bake, "bake", 0, "bake time per wave")
	start.Flags().Float64Var(&maxNack, "max-nack-ratio", 0, "NACK ratio that rolls a wave back")
	start.Flags().IntVar(&minNodes, "min-nodes", 0, "nodes a wave must reach")
	cmd.AddCommand(list, get, start, abort)
	return cmd
}

func rolloutCall(cmd *cobra.Command, c *conn, output, method, id, suffix string) error {
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return fmt.Errorf("rollout id %q: not a number", id)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	path := "/config/rollouts/" + id + suffix
	var raw json.RawMessage
	if method == "GET" {
		raw, err = cl.Raw(cmd.Context(), path)
	} else {
		raw, err = cl.Post(cmd.Context(), path, nil)
	}
	if err != nil {
		return err
	}
	var ro rollout.Rollout
	if err := json.Unmarshal(raw, &ro); err != nil {
		return err
	}
	return printRollouts(cmd.OutOrStdout(), output, ro)
}

func printRollouts(w io.Writer, output string, ros ...rollout.Rollout) error {
	switch output {
	case "json", "yaml":
		return printValue(w, output, ros)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTARGET\tBASELINE\tWAVE\tNODES (ACKED/NACKED/PENDING)\tERROR")
	for _, r := range ros {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d/%d\t%d/%d/%d\t%s\n", r.ID, r.State, r.TargetVersion, r.BaselineVersion,
			r.Wave+1, len(r.Waves), r.Nodes.Acked, r.Nodes.Nacked, r.Nodes.Pending, r.Error)
	}
	return tw.Flush()
}

// printValue prints v as indented JSON, or as YAML.
func printValue(w io.Writer, output string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if output == "yaml" {
		y, err := yamlOf(b)
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, y)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func nodesCommand(c *conn) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List connected xDS clients with their ACKed versions and NACKs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			items, raw, err := listItems[nodeView](cmd, c, "/nodes")
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					return err
				}
				return printValue(cmd.OutOrStdout(), output, v.(map[string]any)["items"])
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCLUSTER\tGROUP\tCONNECTED\tACKED\tNACK")
			for _, n := range items {
				acked, nack := map[string]bool{}, ""
				for _, t := range n.Types {
					if t.AckedVersion != "" {
						acked[t.AckedVersion] = true
					}
					if t.Nack != nil && nack == "" {
						nack = t.Nack.Version + ": " + t.Nack.Error
					}
				}
				vs := make([]string, 0, len(acked))
				for v := range acked {
					vs = append(vs, v)
				}
				sort.Strings(vs)
				group := n.Group
				if n.SecurityChannel {
					group += " (security channel)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Cluster, group, n.ConnectedAt.Format(time.RFC3339),
					strings.Join(vs, ","), nack)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, yaml or json")
	return cmd
}

// nodeView is what nodes prints of GET /nodes.
type nodeView struct {
	ID              string    `json:"id"`
	Cluster         string    `json:"cluster"`
	Group           string    `json:"group"`
	SecurityChannel bool      `json:"securityChannel"`
	ConnectedAt     time.Time `json:"connectedAt"`
	Types           map[string]struct {
		AckedVersion string `json:"ackedVersion"`
		Nack         *struct {
			Version string `json:"version"`
			Error   string `json:"error"`
		} `json:"nack"`
	} `json:"types"`
}

// listItems GETs an admin API list at path and decodes its items; raw is
// the whole answer, for -o json|yaml.
func listItems[T any](cmd *cobra.Command, c *conn, path string) (items []T, raw []byte, err error) {
	cl, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	if raw, err = cl.Raw(cmd.Context(), path); err != nil {
		return nil, nil, err
	}
	var p struct {
		Items []T `json:"items"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, err
	}
	return p.Items, raw, nil
}
