// Package beanstalk provides a client for the beanstalk protocol.
// See http://kr.github.com/beanstalkd/ for the server.
//
// This package is synchronized internally and safe to use from
// multiple goroutines without other coordination.
package beanstalk
