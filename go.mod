module github.com/sproutmq/sprout

go 1.26

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/beanstalkd/go-beanstalk v0.2.0
	github.com/mattn/go-isatty v0.0.20
	github.com/panjf2000/gnet/v2 v2.10.0
	github.com/rs/zerolog v1.35.1
	github.com/valyala/bytebufferpool v1.0.0
	golang.org/x/sys v0.30.0
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/panjf2000/ants/v2 v2.12.1 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
