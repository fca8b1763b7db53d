package cp

import (
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes the group's Raft state at scrape time: whether this
// node leads, the term, the log indexes (commit − applied is apply lag),
// the voter count and the highest revision.
type collector struct {
	g                                          *Group
	leader, term, commit, applied, last, peers *prometheus.Desc
	revision                                   *prometheus.Desc
}

// Collector returns the group's metrics (portico_kvnode_cp_*), for the
// node's registry.
func (g *Group) Collector() prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("portico_kvnode_cp_"+name, help, nil, nil)
	}
	return &collector{g: g,
		leader:   d("leader", "1 when this node is the Raft leader of the consensus tier, else 0."),
		term:     d("term", "Current Raft term; a rising term means elections."),
		commit:   d("commit_index", "Highest Raft log index known committed."),
		applied:  d("applied_index", "Highest Raft log index applied to the key-value state (commit_index − applied_index is apply lag)."),
		last:     d("last_log_index", "Highest Raft log index stored on this node."),
		peers:    d("voters", "Voters in the Raft configuration as this node sees it."),
		revision: d("revision", "Highest key revision in the state (revisions are log indexes)."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.term, c.commit, c.applied, c.last, c.peers, c.revision} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.raft.Stats()
	num := func(k string) float64 {
		v, _ := strconv.ParseFloat(st[k], 64)
		return v
	}
	leader := 0.0
	if c.g.raft.State() == raft.Leader {
		leader = 1
	}
	voters := 0.0
	if f := c.g.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, num("term"))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, num("commit_index"))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, num("applied_index"))
	ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, num("last_log_index"))
	ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, voters)
	ch <- prometheus.MustNewConstMetric(c.revision, prometheus.GaugeValue, float64(c.g.Revision()))
}
