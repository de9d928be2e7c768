package logs

import (
	"errors"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for _, tc := range []struct {
		name    string
		line    string
		want    Entry
		wantErr bool
	}{
		{name: "full stdout", line: "2024-05-06T07:08:09.123456789Z stdout F hello world\n",
			want: Entry{Time: ts, Stream: StreamStdout, Message: []byte("hello world")}},
		{name: "partial stderr", line: "2024-05-06T07:08:09.123456789Z stderr P part",
			want: Entry{Time: ts, Stream: StreamStderr, Partial: true, Message: []byte("part")}},
		{name: "extra tags", line: "2024-05-06T07:08:09.123456789Z stdout F:x:y msg\n",
			want: Entry{Time: ts, Stream: StreamStdout, Message: []byte("msg")}},
		{name: "message keeps spaces", line: "2024-05-06T07:08:09.123456789Z stdout F  a  b \n",
			want: Entry{Time: ts, Stream: StreamStdout, Message: []byte(" a  b ")}},
		{name: "empty message", line: "2024-05-06T07:08:09.123456789Z stdout F \n",
			want: Entry{Time: ts, Stream: StreamStdout, Message: []byte{}}},
		{name: "no space after tag", line: "2024-05-06T07:08:09.123456789Z stdout F\n",
			want: Entry{Time: ts, Stream: StreamStdout}},
		{name: "offset time", line: "2024-05-06T09:08:09.123456789+02:00 stdout F x",
			want: Entry{Time: ts, Stream: StreamStdout, Message: []byte("x")}},
		{name: "only one newline trimmed", line: "2024-05-06T07:08:09.123456789Z stdout F x\n\n",
			want: Entry{Time: ts, Stream: StreamStdout, Message: []byte("x\n")}},
		{name: "empty", line: "", wantErr: true},
		{name: "no stream", line: "2024-05-06T07:08:09.123456789Z", wantErr: true},
		{name: "bad time", line: "yesterday stdout F x", wantErr: true},
		{name: "bad stream", line: "2024-05-06T07:08:09.123456789Z stdin F x", wantErr: true},
		{name: "no tag", line: "2024-05-06T07:08:09.123456789Z stdout", wantErr: true},
		{name: "bad tag", line: "2024-05-06T07:08:09.123456789Z stdout X x", wantErr: true},
		{name: "docker json", line: `{"log":"x\n","stream":"stdout","time":"2024-05-06T07:08:09Z"}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine([]byte(tc.line))
			if tc.wantErr {
				if !errors.Is(err, ErrMalformedLine) {
					t.Fatalf("ParseLine(%q) error = %v, want ErrMalformedLine", tc.line, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLine(%q): %v", tc.line, err)
			}
			if !got.Time.Equal(tc.want.Time) || got.Stream != tc.want.Stream || got.Partial != tc.want.Partial ||
				string(got.Message) != string(tc.want.Message) {
				t.Errorf("ParseLine(%q) = %+v (message %q), want %+v (message %q)",
					tc.line, got, got.Message, tc.want, tc.want.Message)
			}
		})
	}
}
