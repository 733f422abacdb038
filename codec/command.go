package codec

// Op says which command a line (or a put body) produced.
type Op uint8

const (
	// OpNone is a line that matched no command, or one rejected before
	// dispatch (over-long, NUL byte); only Status matters.
	OpNone Op = iota
	// OpPut is a put header. Status OK means the body follows and will come
	// back as OpPutBody; PutTooBig means it will come back as OpPutTooBig.
	OpPut
	// OpPutBody is a complete put body: Body is set, Status is OK or
	// ExpectedCRLF, and Pri, Delay, TTR and Bytes repeat the header's.
	OpPutBody
	// OpPutTooBig means a too-big body has been fully discarded; the reply
	// JOB_TOO_BIG is due now, not at the header.
	OpPutTooBig
	OpUse
	OpReserve
	OpReserveWithTimeout
	OpReserveJob
	OpDelete
	OpRelease
	OpBury
	OpTouch
	OpWatch
	OpIgnore
	OpPeek
	OpPeekReady
	OpPeekDelayed
	OpPeekBuried
	OpKick
	OpKickJob
	OpStatsJob
	OpStatsTube
	OpStats
	OpListTubes
	OpListTubeUsed
	OpListTubesWatched
	OpPauseTube
	OpQuit
	numOps
)

var opNames = [numOps]string{
	OpPut:                "put",
	OpPutBody:            "put",
	OpPutTooBig:          "put",
	OpUse:                "use",
	OpReserve:            "reserve",
	OpReserveWithTimeout: "reserve-with-timeout",
	OpReserveJob:         "reserve-job",
	OpDelete:             "delete",
	OpRelease:            "release",
	OpBury:               "bury",
	OpTouch:              "touch",
	OpWatch:              "watch",
	OpIgnore:             "ignore",
	OpPeek:               "peek",
	OpPeekReady:          "peek-ready",
	OpPeekDelayed:        "peek-delayed",
	OpPeekBuried:         "peek-buried",
	OpKick:               "kick",
	OpKickJob:            "kick-job",
	OpStatsJob:           "stats-job",
	OpStatsTube:          "stats-tube",
	OpStats:              "stats",
	OpListTubes:          "list-tubes",
	OpListTubeUsed:       "list-tube-used",
	OpListTubesWatched:   "list-tubes-watched",
	OpPauseTube:          "pause-tube",
	OpQuit:               "quit",
}

// String returns the command's wire name; the three put stages all say
// "put" because that is the command the client sent. OpNone is "".
func (o Op) String() string {
	if o >= numOps {
		return ""
	}
	return opNames[o]
}

// Counter returns the stats counter (cmd-*) that o belongs to. reserve-job,
// kick-job and quit have none. Whether a given command is counted (only
// after its arguments parse, except pause-tube) is the engine's decision.
func (o Op) Counter() (Counter, bool) {
	switch o {
	case OpPut:
		return CmdPut, true
	case OpPeek:
		return CmdPeek, true
	case OpPeekReady:
		return CmdPeekReady, true
	case OpPeekDelayed:
		return CmdPeekDelayed, true
	case OpPeekBuried:
		return CmdPeekBuried, true
	case OpReserve:
		return CmdReserve, true
	case OpReserveWithTimeout:
		return CmdReserveWithTimeout, true
	case OpDelete:
		return CmdDelete, true
	case OpRelease:
		return CmdRelease, true
	case OpUse:
		return CmdUse, true
	case OpWatch:
		return CmdWatch, true
	case OpIgnore:
		return CmdIgnore, true
	case OpBury:
		return CmdBury, true
	case OpKick:
		return CmdKick, true
	case OpTouch:
		return CmdTouch, true
	case OpStats:
		return CmdStats, true
	case OpStatsJob:
		return CmdStatsJob, true
	case OpStatsTube:
		return CmdStatsTube, true
	case OpListTubes:
		return CmdListTubes, true
	case OpListTubeUsed:
		return CmdListTubeUsed, true
	case OpListTubesWatched:
		return CmdListTubesWatched, true
	case OpPauseTube:
		return CmdPauseTube, true
	}
	return 0, false
}

// Status says whether a command parsed, and if not, which reply it earns.
type Status uint8

const (
	// OK: the command parsed; act on it.
	OK Status = iota
	// BadFormat: reply BAD_FORMAT.
	BadFormat
	// UnknownCommand: reply UNKNOWN_COMMAND.
	UnknownCommand
	// ExpectedCRLF (OpPutBody only): the body's last two bytes were not
	// "\r\n". beanstalkd still consumes a job id for it.
	ExpectedCRLF
	// PutTooBig (OpPut only): the header parsed but bytes exceeds the
	// maximum job size. Count cmd-put now; the body is being discarded and
	// JOB_TOO_BIG is replied when OpPutTooBig arrives.
	PutTooBig
	// CountedBadFormat: reply BAD_FORMAT, but count the command, because
	// beanstalkd counts it before the check that fails. Two cases: put whose
	// four integers parse and whose size is allowed, with something after
	// <bytes> (the body is not consumed, so it will be parsed as commands);
	// pause-tube whose name and delay parse but whose name is invalid
	// (starts with '-' or is over 200 bytes).
	CountedBadFormat
	// TLSRecord (OpNone): the line starts with a TLS handshake record's
	// header, a TLS client on the plaintext port. beanstalkd would wait
	// for a line end, which never comes while the client waits for the
	// server's hello; the caller closes the connection at once instead.
	// Parse consumes everything it was given.
	TLSRecord
)

var statusNames = [...]string{
	OK:               "OK",
	BadFormat:        "BAD_FORMAT",
	UnknownCommand:   "UNKNOWN_COMMAND",
	ExpectedCRLF:     "EXPECTED_CRLF",
	PutTooBig:        "PUT_TOO_BIG",
	CountedBadFormat: "COUNTED_BAD_FORMAT",
	TLSRecord:        "TLS_RECORD",
}

func (s Status) String() string {
	if int(s) >= len(statusNames) {
		return ""
	}
	return statusNames[s]
}

// Command is one parsed command. Parse overwrites all of it each time it
// reports one, so a caller can reuse a single Command per connection.
type Command struct {
	Op     Op
	Status Status
	// BodyAliased says that Body aliases the input (see Body).
	BodyAliased bool

	// ID is the job id of reserve-job, delete, release, bury, touch, peek,
	// kick-job and stats-job, and for OpPutBody the id the caller gave
	// Parser.SetPutID at the put's header.
	ID uint64
	// PutAt is, for OpPutBody, the time the caller gave Parser.SetPutAt
	// while the put waited for its body, or Unstamped.
	PutAt int64
	// Pri is set by put and OpPutBody, release and bury.
	Pri uint32
	// Delay is in seconds: put, release, pause-tube.
	Delay uint32
	// TTR is in seconds as sent; clamping 0 to 1 is the engine's job.
	TTR uint32
	// Bytes is put's declared body length, without the trailing "\r\n".
	Bytes uint32
	// Count is kick's bound, with C strtoul's leniency, truncated to 32 bits.
	Count uint32
	// Timeout is reserve-with-timeout's wait in seconds, at most MaxTimeout.
	Timeout uint32

	// Tube is the name given to use, watch, ignore, stats-tube and
	// pause-tube. It aliases the input passed to Parse, so it is valid only
	// until the caller discards those bytes; copy it to keep it.
	Tube []byte
	// Body is the put body of OpPutBody, len Bytes+2, including the two
	// trailing bytes as sent. A body that was all in the input of the call
	// that completed it aliases that input (BodyAliased), like Tube: copy
	// it to keep it. Otherwise it is freshly allocated and belongs to the
	// caller.
	Body []byte
}
