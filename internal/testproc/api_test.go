package testproc

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMetricSeries: the family asked for alone, each of its series by
// name and labels, HELP and TYPE left out; a line without a value is an
// error.
func TestMetricSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.URL.Query()["name[]"]; len(got) != 1 || got[0] != "moves_total" {
			http.Error(w, fmt.Sprintf("asked for %q", got), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "# HELP moves_total Moves.\n# TYPE moves_total counter\n"+
			"moves_total{by=\"a b\"} 3\nmoves_total{by=\"c\"} 0\n")
	}))
	defer srv.Close()
	got, err := MetricSeries(srv.Client(), srv.URL, "moves_total")
	want := map[string]float64{`moves_total{by="a b"}`: 3, `moves_total{by="c"}`: 0}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) { // fmt prints a map in key order
		t.Fatalf("MetricSeries: %v %v, want %v", got, err, want)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "moves_total\n")
	}))
	defer bad.Close()
	if got, err := MetricSeries(bad.Client(), bad.URL, "moves_total"); err == nil {
		t.Fatalf("MetricSeries of a line without a value: %v, want an error", got)
	}
}
