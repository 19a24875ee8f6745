// Package txnid is the load harness's kernel: the producers' transactionId
// scheme ("lt<producer>-<seq>", its key and its partition, the payload it
// always carries) and the consumers' poison rule (which transactionIds fail
// every delivery, and how a consumer fails them). Producers, consumers and
// the audits import it; it imports nothing of the harness and does no I/O.
package txnid
