package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/schollz/progressbar/v3"
)

// renderTable lays rows out under headers in columns two spaces apart,
// without borders, so that it reads like ps and greps line by line. A
// column of numbers (and of "" or "-" for none) is aligned right, any
// other left. (Headers are
// required: lipgloss v1.1.0 drops the last row of a table without them and
// without a header border, lipgloss issue 610.)
func renderTable(headers []string, rows [][]string) string {
	numeric := make([]bool, len(headers))
	for col := range numeric {
		numeric[col] = true
		for _, row := range rows {
			if col < len(row) && row[col] != "" && row[col] != "-" && !isNumber(row[col]) {
				numeric[col] = false
				break
			}
		}
	}
	t := table.New().Headers(headers...).Rows(rows...).
		Border(lipgloss.HiddenBorder()).
		BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderHeader(false).BorderColumn(false).
		StyleFunc(func(_, col int) lipgloss.Style {
			s := lipgloss.NewStyle()
			if col > 0 {
				s = s.PaddingLeft(2)
			}
			if numeric[col] {
				s = s.Align(lipgloss.Right)
			}
			return s
		})
	// lipgloss pads every cell to its column's width, the last too.
	lines := strings.Split(t.Render(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func writeTable(w io.Writer, headers []string, rows [][]string) error {
	_, err := fmt.Fprintln(w, renderTable(headers, rows))
	return err
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// bodyJSON returns a body as the admin API carries it: as a string when
// it is valid UTF-8, else in standard base64.
func bodyJSON(body []byte) (text, encoding string) {
	if utf8.Valid(body) {
		return string(body), "text"
	}
	return base64.StdEncoding.EncodeToString(body), "base64"
}

// readable reports whether body prints as text on a terminal: valid UTF-8
// with no control characters but tab, newline and carriage return.
func readable(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	for _, r := range string(body) {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

// writeBody writes a body for people: as it is when readable, else as a
// hex dump, so that no control byte reaches the terminal.
func writeBody(w io.Writer, body []byte) error {
	if !readable(body) {
		_, err := io.WriteString(w, hex.Dump(body))
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		_, err := io.WriteString(w, "\n")
		return err
	}
	return nil
}

// newBar returns a progress bar over total jobs, drawn on stderr when it
// is a terminal and invisible otherwise (a script reads the summary line
// that follows the work instead).
func (o *options) newBar(total int64, description string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(o.stderr),
		progressbar.OptionSetVisibility(o.progress),
		progressbar.OptionSetDescription(description),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("jobs"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// countJobs returns "1 job" or "N jobs".
func countJobs(n int64) string {
	if n == 1 {
		return "1 job"
	}
	return strconv.FormatInt(n, 10) + " jobs"
}
