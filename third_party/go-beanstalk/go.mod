module github.com/beanstalkd/go-beanstalk

go 1.14
