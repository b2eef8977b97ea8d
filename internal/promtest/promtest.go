// Package promtest reads Prometheus series for tests: a scrape's text,
// or a registry's gathering, as one map of "name{k=v,...}" to value,
// which a test compares before and after what it did.
package promtest

import (
	"bytes"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series flattens families: a counter or gauge by "name{k=v,...}" (labels
// sorted by name), a histogram by its sample count as "name_count{...}".
func Series(mfs []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var l []string
			for _, p := range m.GetLabel() {
				l = append(l, p.GetName()+"="+p.GetValue())
			}
			sort.Strings(l)
			key := "{" + strings.Join(l, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[mf.GetName()+key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[mf.GetName()+key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// Parse reads an exposition in the text format, failing the test when it
// does not parse.
func Parse(tb testing.TB, body []byte) map[string]*dto.MetricFamily {
	tb.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		tb.Fatalf("parse the exposition: %v\n%s", err, body)
	}
	return mfs
}

// Scrape gets url (with bearer as its token, when set) and returns its
// series; anything but 200 fails the test.
func Scrape(tb testing.TB, url, bearer string) map[string]float64 {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	var mfs []*dto.MetricFamily
	for _, mf := range Parse(tb, body) {
		mfs = append(mfs, mf)
	}
	return Series(mfs)
}
