package hostmetrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/projector"
)

var (
	descResources = prometheus.NewDesc("mesh_host_resources",
		"Resources by state, from the stored projection: owned (applied and not deleted), failing (owned whose latest apply failed, and declared ones never applied), drifted (owned with drift observed since their last successful apply), released (left in place and no longer owned, since this process started: the projection forgets them).",
		[]string{"state"}, nil)
	descRefreshOwed = prometheus.NewDesc("mesh_host_refresh_owed",
		"Refreshes owed (a restart, reload or run a change asked of a unit or exec, journaled until delivered).",
		nil, nil)
	descRevision = prometheus.NewDesc("mesh_host_declaration_revision",
		"Declaration revisions: desired (the latest accepted), applied (that of the latest completed reconcile, converged or not), last_good (the latest that converged); 0 while there is none.",
		[]string{"which"}, nil)
	descRecords = prometheus.NewDesc("mesh_host_journal_records",
		"Records stored in the journal (those compaction dropped are not).",
		nil, nil)
	descBytes = prometheus.NewDesc("mesh_host_journal_bytes",
		"The journal file's size in bytes.",
		nil, nil)
)

// storedCollector reads the gauges of the stored projection when scraped.
// What it walks every owned resource for (owned, failing, drifted) it keeps
// with the projection's head, and walks again only when the head moved:
// between reconciles, a scrape reads the journal's meta alone.
type storedCollector struct {
	m *Metrics

	mu     sync.Mutex
	j      *journal.Journal
	cached bool
	head   uint64
	counts storedCounts
}

// storedCounts is what a scrape reports of the projection as of a head.
type storedCounts struct {
	owned, failing, drifted    int
	refreshes                  int
	desired, applied, lastGood uint64
}

func (c *storedCollector) attach(j *journal.Journal) {
	c.mu.Lock()
	c.j, c.cached = j, false
	c.mu.Unlock()
}

func (c *storedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descResources, descRefreshOwed, descRevision, descRecords, descBytes} {
		ch <- d
	}
}

func (c *storedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.j == nil {
		return
	}
	info, err := c.j.Info()
	if err != nil {
		c.invalid(ch, hostjournal.AsDamage(c.j, err))
		return
	}
	if !c.cached || info.Head != c.head {
		counts, head, err := readCounts(c.j)
		if err != nil {
			c.invalid(ch, err)
			return
		}
		c.counts, c.head, c.cached = counts, head, true
	}
	c.m.mu.Lock()
	released := c.m.released
	c.m.mu.Unlock()
	n := c.counts
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descResources, float64(n.owned), "owned")
	gauge(descResources, float64(n.failing), "failing")
	gauge(descResources, float64(n.drifted), "drifted")
	gauge(descResources, float64(released), "released")
	gauge(descRefreshOwed, float64(n.refreshes))
	gauge(descRevision, float64(n.desired), "desired")
	gauge(descRevision, float64(n.applied), "applied")
	gauge(descRevision, float64(n.lastGood), "last_good")
	var records uint64
	if info.First > 0 && info.Head >= info.First {
		records = info.Head - info.First + 1
	}
	gauge(descRecords, float64(records))
	gauge(descBytes, float64(info.Size))
}

// invalid reports err for each of the collector's series: the scrape
// fails (promhttp.HTTPErrorOnError) rather than report what it could not
// read.
func (c *storedCollector) invalid(ch chan<- prometheus.Metric, err error) {
	if errors.Is(err, journal.ErrClosed) {
		return // the service is stopping
	}
	ch <- prometheus.NewInvalidMetric(descResources, err)
}

// releaseAfterOwned is how many owned resources a walk reads before it
// lets go of the journal's pages it read, as the reconcile's walk does
// (hostjournal.StoredOwned): a scrape must not leave the projection of a
// large host counted as the service's memory.
const releaseAfterOwned = 2_000

// readCounts reads the stored projection's counts and the head they are
// as of, in one read transaction.
func readCounts(j *journal.Journal) (storedCounts, uint64, error) {
	var n storedCounts
	var head uint64
	err := j.Projection(func(v journal.View, at uint64) error {
		head = at
		// Not LoadCore: that decodes a line for every resource declared.
		s, err := projector.LoadSummary(v)
		if err != nil {
			return err
		}
		n.failing, n.refreshes = len(s.Failing), len(s.Refreshes)
		if s.Desired != nil {
			n.desired = s.Desired.Revision
		}
		if s.LastReconcile != nil {
			n.applied = s.LastReconcile.Revision
		}
		if s.LastGood != nil {
			n.lastGood = s.LastGood.Revision
		}
		// Counted in place, nothing copied: a scrape after each reconcile
		// of a large host must not leave a copy of its owned set behind.
		owned, err := projector.CountOwned(v)
		if err != nil {
			return err
		}
		// Failed as the heartbeat counts them (linkproto.HeartbeatOf).
		n.owned, n.drifted, n.failing = owned.Owned, owned.Drifted, n.failing+owned.Failed
		return nil
	})
	if err != nil {
		return n, 0, hostjournal.AsDamage(j, err)
	}
	if n.owned > releaseAfterOwned {
		if err := j.Release(); err != nil {
			return n, 0, hostjournal.AsDamage(j, err)
		}
	}
	return n, head, nil
}
