package porticoctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/portico-io/portico/controlplane/admin"
	"github.com/portico-io/portico/controlplane/adminclient"
	"github.com/portico-io/portico/controlplane/manifest"
	"github.com/portico-io/portico/controlplane/spec"
)

// The declarative commands: get, apply, delete, export. Their files are
// manifest documents (kind: + the resource's fields); apply sends them to
// POST /admin/v1/config:apply, which checks and writes them as one version.

func getCommand(c *conn) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get KIND [NAME]",
		Short: "Show resources of a kind, or one resource",
		Long: "get lists the live resources of a kind (" + kindList() + `), or shows one.
Secrets show hasPrivateKey, never the key.`,
		Example: `  porticoctl get routes
  porticoctl get cluster echo -o yaml`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := manifest.ParseKind(args[0])
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var items []json.RawMessage
			if len(args) == 2 {
				r, _, err := cl.Get(cmd.Context(), k, args[1])
				if err != nil {
					return err
				}
				items = []json.RawMessage{r}
			} else if items, err = cl.List(cmd.Context(), k); err != nil {
				return err
			}
			return printResources(cmd.OutOrStdout(), k, items, output, len(args) == 2)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, yaml or json")
	return cmd
}

func kindList() string {
	s := make([]string, len(manifest.Kinds))
	for i, k := range manifest.Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// docs turns API resources of kind k into manifest documents.
func docs(k spec.Kind, items []json.RawMessage) ([]manifest.Document, error) {
	out := make([]manifest.Document, 0, len(items))
	for _, it := range items {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(it, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		var name string
		_ = json.Unmarshal(obj[manifest.NameField(k)], &name)
		out = append(out, manifest.Document{Kind: k, Name: name, Resource: it})
	}
	return out, nil
}

func printResources(w io.Writer, k spec.Kind, items []json.RawMessage, output string, one bool) error {
	switch output {
	case "json":
		var v any = items
		if one {
			v = items[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		d, err := docs(k, items)
		if err != nil {
			return err
		}
		return manifest.Encode(w, d, nil)
	case "table", "":
		cols := tableColumns[k]
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		head := []string{strings.ToUpper(manifest.NameField(k))}
		for _, c := range cols {
			head = append(head, c.title)
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, it := range items {
			var obj map[string]any
			if err := json.Unmarshal(it, &obj); err != nil {
				return err
			}
			row := []string{cell(lookup(obj, manifest.NameField(k)))}
			for _, c := range cols {
				row = append(row, c.value(obj))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		return tw.Flush()
	}
	return fmt.Errorf("--output %q: want table, yaml or json", output)
}

type column struct {
	title string
	value func(map[string]any) string
}

func field(title string, paths ...string) column {
	return column{title, func(o map[string]any) string {
		for _, p := range paths {
			if v := lookup(o, p); v != nil {
				return cell(v)
			}
		}
		return ""
	}}
}

// tableColumns are the columns of get's table, after the name.
var tableColumns = map[spec.Kind][]column{
	spec.KindCluster: {{"ENDPOINTS", func(o map[string]any) string {
		eps, _ := o["endpoints"].([]any)
		var s []string
		for _, e := range eps {
			m, _ := e.(map[string]any)
			s = append(s, fmt.Sprintf("%v:%v", cell(m["address"]), cell(m["port"])))
		}
		return strings.Join(s, ",")
	}}},
	spec.KindRoute: {field("MATCH", "match.pathPrefix", "match.path", "match.pathRegex"), field("CLUSTER", "cluster"),
		field("AUTH", "auth.mode")},
	spec.KindJWTProvider:   {field("ISSUER", "issuer")},
	spec.KindConsumer:      {field("TENANT", "tenant"), field("TIER", "tier")},
	spec.KindRevocation:    {field("EXPIRES", "expiresAt")},
	spec.KindRateLimitRule: {field("DOMAIN", "domain"), field("LIMIT", "limit"), field("WINDOW", "window")},
	spec.KindSecret:        {field("TYPE", "type"), field("NOT AFTER", "notAfter")},
	spec.KindListener:      {field("PORT", "port")},
	spec.KindRedisProxy:    {field("PORT", "listen.port")},
}

func lookup(o map[string]any, path string) any {
	var v any = o
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func applyCommand(c *conn) *cobra.Command {
	var (
		files      []string
		dry, prune bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR [-f ...] [--dry-run] [--prune]",
		Short: "Make the live config match files, as one config version",
		Long: `apply reads resource documents (YAML, "kind:" plus the resource's fields,
as export writes them) and sends them to the control plane, which compares
them with the live config, checks the result as a whole and writes every
change in ONE new config version. It prints the diff: created, updated,
deleted and unchanged resources. Applying the same files again changes
nothing and makes no version.

--dry-run asks the server to check everything and answer the diff without
storing anything. --prune also deletes the live resources of the kinds the
files contain that the files do not name (kinds absent from the files are
left alone). A secret without privateKey keeps the key the server holds.`,
		Example: `  porticoctl export -d config/       # the live config, one file per kind
  porticoctl apply -f config/ --dry-run
  porticoctl apply -f config/ --prune --reason "release 42"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("-f FILE|DIR is required")
			}
			d, err := manifest.Read(files...)
			if err != nil {
				return err
			}
			req := admin.ApplyRequest{Items: make([]admin.ApplyItem, len(d))}
			for i, doc := range d {
				req.Items[i] = admin.ApplyItem{Kind: doc.Kind, Name: doc.Name, Resource: doc.Resource}
				if prune && !slices.Contains(req.Prune, doc.Kind) {
					req.Prune = append(req.Prune, doc.Kind)
				}
			}
			if len(req.Items) == 0 {
				return fmt.Errorf("no resources in %s", strings.Join(files, ", "))
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.Apply(cmd.Context(), req, dry)
			if err != nil {
				return err
			}
			return printApply(cmd.OutOrStdout(), res)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file or directory of resource documents (repeatable)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "check and show the diff; change nothing")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete live resources of the files' kinds that the files do not name")
	return cmd
}

func deleteCommand(c *conn) *cobra.Command {
	return &cobra.Command{
		Use:     "delete KIND NAME",
		Short:   "Delete one resource (a new config version)",
		Example: `  porticoctl delete route echo`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := manifest.ParseKind(args[0])
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.Delete(cmd.Context(), k, args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s/%s in version %d\n", k, args[1], v)
			return nil
		},
	}
}

// configViewKeys maps manifest kinds to the fields of the API's config
// view (GET /config/versions/{n}).
var configViewKeys = map[spec.Kind]string{
	spec.KindCluster: "clusters", spec.KindRoute: "routes", spec.KindJWTProvider: "jwtProviders",
	spec.KindConsumer: "consumers", spec.KindRevocation: "revocations", spec.KindRateLimitRule: "ratelimitRules",
	spec.KindSecret: "secrets", spec.KindListener: "listeners", spec.KindRedisProxy: "redisProxies",
}

// exportDocs turns a config view into documents, in kind then name order.
// Secrets lose the view's read-only fields, so the files apply back as
// they are.
func exportDocs(view adminclient.ConfigView) ([]manifest.Document, error) {
	var (
		out []manifest.Document
		err error
	)
	for _, k := range manifest.Kinds {
		var items []json.RawMessage
		if raw := view[configViewKeys[k]]; len(raw) > 0 {
			if err := json.Unmarshal(raw, &items); err != nil {
				return nil, fmt.Errorf("config view %s: %w", k, err)
			}
		}
		if k == spec.KindSecret {
			for i, it := range items {
				if items[i], err = dropFields(it, "hasPrivateKey", "notAfter"); err != nil {
					return nil, err
				}
			}
		}
		d, err := docs(k, items)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	manifest.Sort(out)
	return out, nil
}

// dropFields removes top-level fields of a JSON object, keeping the order
// of the others.
func dropFields(obj json.RawMessage, fields ...string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	found := false
	for _, f := range fields {
		if _, ok := m[f]; ok {
			found = true
		}
	}
	if !found {
		return obj, nil
	}
	// Re-encode through an ordered walk so the API's field order stays.
	dec := json.NewDecoder(strings.NewReader(string(obj)))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if slices.Contains(fields, key) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(key)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return json.RawMessage(b.String()), nil
}

// secretComment marks exported secrets that hold a private key.
func secretComment(hasKey map[string]bool) func(manifest.Document) string {
	return func(d manifest.Document) string {
		if d.Kind == spec.KindSecret && hasKey[d.Name] {
			return "The private key is not exported: applied here it keeps the server's key;\n" +
				"elsewhere add privateKey (or use files) before applying."
		}
		return ""
	}
}

func exportCommand(c *conn) *cobra.Command {
	var (
		dir     string
		version int64
	)
	cmd := &cobra.Command{
		Use:   "export [-d DIR] [--version N]",
		Short: "Write the whole config as resource documents (GitOps)",
		Long: `export writes the config of one version (default: the newest) as YAML
documents that apply takes back: with -d one file per kind (<kind>.yaml),
otherwise one stream on stdout. The order is fixed (kind, then name), so
the same config always gives the same files. Secrets' private keys are never
exported; API keys are credentials, not config, and are not exported.`,
		Example: `  porticoctl export -d config/ && git -C config diff`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			view, v, err := cl.Config(cmd.Context(), version)
			if err != nil {
				return err
			}
			hasKey := map[string]bool{}
			var secrets []struct {
				Name          string `json:"name"`
				HasPrivateKey bool   `json:"hasPrivateKey"`
			}
			if raw := view["secrets"]; len(raw) > 0 {
				_ = json.Unmarshal(raw, &secrets)
			}
			for _, s := range secrets {
				hasKey[s.Name] = s.HasPrivateKey
			}
			d, err := exportDocs(view)
			if err != nil {
				return err
			}
			if dir == "" {
				return manifest.Encode(cmd.OutOrStdout(), d, secretComment(hasKey))
			}
			files, err := manifest.WriteDir(dir, d, secretComment(hasKey))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported version %d: %d resources in %d files under %s\n", v, len(d), len(files), dir)
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "directory for one file per kind (default: stdout)")
	cmd.Flags().Int64Var(&version, "version", 0, "config version to export (default: the newest)")
	return cmd
}
