// Command sproutctl is the operator's command line for Sprout and for any
// beanstalkd-compatible server.
//
//	sproutctl [-s HOST:PORT] [--api URL --token-file FILE] COMMAND [ARGS]
//
// # Commands
//
//	stats                       the server's stats (--json: typed values)
//	tubes                       one line per tube: its jobs by state, waiting workers, pause
//	top                         a live view: server, tubes, put/s and delete/s; q quits
//	                            (--batch N / --once print N frames for scripts)
//	peek TUBE [STATE]           the next ready, delayed or buried job: id, stats, body
//	                            (text if printable UTF-8, else a hex dump; --raw, --json)
//	put TUBE [FILE|-]           a job from FILE or stdin (--pri, --delay, --ttr); prints its id
//	reserve TUBE                take the next ready job: show it as peek does, then delete it
//	                            (--release, --bury instead; --wait for one to come)
//	delete ID                   delete a job
//	kick TUBE N                 kick up to N buried (or, with none buried, delayed) jobs
//	pause TUBE DURATION         pause reservations: 30s, 5m or plain seconds, rounded up
//	clear TUBE --state STATE    delete the ready, delayed, buried or all jobs of a tube
//	jobs TUBE [--state STATE]   list a tube's jobs; admin API only
//	move --from A --to B TUBE…  carry the ready jobs of tubes from server A to server B
//	members [list|add|remove]   a cluster's members: list, add NAME ADDR, remove NAME;
//	                            the membership endpoint on a member's --http (--api)
//	groups [list|move]          a cluster's Raft groups: leader, replicas, tubes, jobs;
//	                            move G FROM TO moves a group's replica (--api)
//
// A TUBE is a name as beanstalkd 1.13 takes it: 1 to 200 bytes of the
// letters, digits and -+/;.$_(), not starting with -. Every command that
// names a tube refuses any other (exit status 2) before it contacts a
// server, so that beanstalkd, Sprout and the admin API do not each answer
// it in their own way.
//
// # Protocol or admin API
//
// Everything the beanstalk protocol can do goes over the protocol (the
// go-beanstalk client), so sproutctl works against C beanstalkd as well
// as Sprout. The admin API (Sprout's --http port, /api/v1, with a bearer
// token) is used only where it is given (--api, SPROUT_API) and where the
// protocol falls short:
//
//   - jobs needs it: the protocol cannot list jobs. Without --api it fails
//     with a usage error that says so.
//   - clear uses it when given: one request, cleared in batches inside the
//     server. Without it clear peeks and deletes one job at a time, which
//     works anywhere but cannot reach reserved jobs; "all" then means
//     ready, delayed and buried.
//
// The token comes from --token, --token-file or SPROUT_ADMIN_TOKEN, in that
// order; prefer the file or the variable, as a flag shows in ps. The client
// of the API (api.go) is written against the admin API's contract, the
// OpenAPI document internal/admin/openapi.json.
//
// # Move
//
// move carries jobs one at a time, so that none is lost: it reserves a job
// on the source (watching only that tube, reserve-with-timeout 0), reads
// its priority and TTR (stats-job), puts it into the same tube on the
// target (created by use where it does not exist) with the same priority,
// TTR and body bytes and no delay, and deletes it from the source only once
// the target answered INSERTED. On a failure it releases the job back on
// the source; if its connection to the source is gone, the source does that
// itself. If the delete finds the job gone (its TTR ran out first) the copy
// on the target is deleted again, and the job is moved on a later turn.
// Only a crash between the put and the delete leaves a job on both.
// Reserving a job counts a reserve in its stats and starts its TTR. --kick
// first kicks every buried and delayed job of the tube, so that they move
// too. Reserve cannot take jobs from a paused tube: move refuses one. The
// two servers' stats ids are compared first, so a move onto the same server
// is refused rather than run in a circle.
//
// # Exit statuses
//
//	0  done
//	1  failed: an error from the server, a refused job, a partial move
//	2  usage: unknown command or flag, a bad argument
//	3  not found or nothing to do: no such job or tube, no job to peek,
//	   kick, clear or move
//	4  the server (or the admin API) could not be reached, or the
//	   connection was lost or timed out (--timeout, default 10s, bounds
//	   connecting and each reply; a clear through the admin API waits for
//	   its one answer as long as the server works on it)
//
// Output for people goes to stdout as tables and lines; errors go to
// stderr, one line, prefixed "sproutctl: ". Progress bars (move, clear)
// are drawn on stderr when it is a terminal. --json on stats, tubes, peek
// and jobs writes one JSON document in the shapes of the admin API.
package main
