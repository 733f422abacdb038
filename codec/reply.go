package codec

import "strconv"

// Fixed replies, byte for byte as beanstalkd sends them. They are constants
// so no caller can alter them; append(dst, ReplyDeleted...) copies without
// allocating.
const (
	ReplyNotFound       = "NOT_FOUND\r\n"
	ReplyDeleted        = "DELETED\r\n"
	ReplyReleased       = "RELEASED\r\n"
	ReplyBuried         = "BURIED\r\n"
	ReplyTouched        = "TOUCHED\r\n"
	ReplyKicked         = "KICKED\r\n"
	ReplyTimedOut       = "TIMED_OUT\r\n"
	ReplyDeadlineSoon   = "DEADLINE_SOON\r\n"
	ReplyNotIgnored     = "NOT_IGNORED\r\n"
	ReplyPaused         = "PAUSED\r\n"
	ReplyOutOfMemory    = "OUT_OF_MEMORY\r\n"
	ReplyInternalError  = "INTERNAL_ERROR\r\n"
	ReplyDraining       = "DRAINING\r\n"
	ReplyBadFormat      = "BAD_FORMAT\r\n"
	ReplyUnknownCommand = "UNKNOWN_COMMAND\r\n"
	ReplyExpectedCRLF   = "EXPECTED_CRLF\r\n"
	ReplyJobTooBig      = "JOB_TOO_BIG\r\n"
)

// Words for AppendJob and AppendJobHeader.
const (
	WordReserved = "RESERVED"
	WordFound    = "FOUND"
)

// AppendInserted appends "INSERTED <id>\r\n".
func AppendInserted(dst []byte, id uint64) []byte {
	return appendWordUint(dst, "INSERTED ", id)
}

// AppendBuriedID appends "BURIED <id>\r\n", the put reply when the job could
// not be queued and was buried instead.
func AppendBuriedID(dst []byte, id uint64) []byte {
	return appendWordUint(dst, "BURIED ", id)
}

// AppendJob appends "<word> <id> <bytes>\r\n" and the body. body is the job
// body as stored, already ending in "\r\n", which <bytes> does not count.
func AppendJob(dst []byte, word string, id uint64, body []byte) []byte {
	dst = AppendJobHeader(dst, word, id, len(body))
	return append(dst, body...)
}

// AppendJobHeader appends only the "<word> <id> <bytes>\r\n" line of
// AppendJob, for callers that write the body separately (writev).
// storedLen is len(body) as stored, i.e. including its trailing "\r\n";
// the line announces storedLen-2.
func AppendJobHeader(dst []byte, word string, id uint64, storedLen int) []byte {
	dst = append(dst, word...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(storedLen-2), 10)
	return append(dst, "\r\n"...)
}

// AppendUsing appends "USING <tube>\r\n"; names are never quoted.
func AppendUsing(dst []byte, tube string) []byte {
	dst = append(dst, "USING "...)
	dst = append(dst, tube...)
	return append(dst, "\r\n"...)
}

// AppendWatching appends "WATCHING <n>\r\n".
func AppendWatching(dst []byte, n int) []byte {
	dst = append(dst, "WATCHING "...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, "\r\n"...)
}

// AppendKicked appends "KICKED <n>\r\n", the reply to kick. kick-job's
// reply is the bare ReplyKicked.
func AppendKicked(dst []byte, n uint64) []byte {
	return appendWordUint(dst, "KICKED ", n)
}

// AppendOK appends "OK <len>\r\n<yaml>\r\n"; the length excludes the final
// "\r\n".
func AppendOK(dst []byte, yaml []byte) []byte {
	dst = append(dst, "OK "...)
	dst = strconv.AppendInt(dst, int64(len(yaml)), 10)
	dst = append(dst, "\r\n"...)
	dst = append(dst, yaml...)
	return append(dst, "\r\n"...)
}

func appendWordUint(dst []byte, word string, v uint64) []byte {
	dst = append(dst, word...)
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, "\r\n"...)
}
