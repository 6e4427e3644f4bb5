package localrt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"golang.org/x/sync/errgroup"
)

// Wipe deletes every item of table (in parallel scan segments) and every
// message of the given queues: the local stack's "start from nothing" for
// test runners that reset state between tests. Nothing on AWS calls it.
func Wipe(ctx context.Context, cfg aws.Config, table string, queueURLs []string) (int, error) {
	db := dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions)
	const segments = 4
	var g errgroup.Group
	var total atomic.Int64
	for seg := range segments {
		g.Go(func() error {
			n, err := wipeSegment(ctx, db, table, int32(seg), segments)
			total.Add(int64(n))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return int(total.Load()), err
	}
	client := sqs.NewFromConfig(cfg)
	for _, u := range queueURLs {
		if err := drain(ctx, client, u); err != nil {
			return int(total.Load()), err
		}
	}
	return int(total.Load()), nil
}

// drain receives and deletes a queue's visible messages (PurgeQueue is a
// no-op on the emulator).
func drain(ctx context.Context, client *sqs.Client, url string) error {
	for range 1000 {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil {
			return fmt.Errorf("drain %s: %w", url, err)
		}
		if len(out.Messages) == 0 {
			return nil
		}
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		if _, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			return fmt.Errorf("drain %s: %w", url, err)
		}
	}
	return nil
}

func wipeSegment(ctx context.Context, db *dynamodb.Client, table string, seg, segments int32) (int, error) {
	n := 0
	in := &dynamodb.ScanInput{TableName: aws.String(table), Segment: aws.Int32(seg), TotalSegments: aws.Int32(segments),
		ProjectionExpression: aws.String("pk, sk"), ConsistentRead: aws.Bool(true)}
	for {
		out, err := db.Scan(ctx, in)
		if err != nil {
			return n, fmt.Errorf("scan %s: %w", table, err)
		}
		for i := 0; i < len(out.Items); i += 25 {
			batch := out.Items[i:min(i+25, len(out.Items))]
			reqs := make([]types.WriteRequest, len(batch))
			for j, key := range batch {
				reqs[j] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key}}
			}
			pending := map[string][]types.WriteRequest{table: reqs}
			for len(pending[table]) > 0 {
				res, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
				if err != nil {
					return n, fmt.Errorf("delete from %s: %w", table, err)
				}
				pending = res.UnprocessedItems
			}
			n += len(batch)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return n, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// Reset wipes the running stack's table and push-mode queues (Wipe) and
// recycles every function's execution environments, so that no cache of what
// was wiped is used again.
func (rt *Runtime) Reset(ctx context.Context) (int, error) {
	n, err := Wipe(ctx, rt.cfg.AWS, rt.cfg.Table, slices.Collect(maps.Values(rt.queueURLs)))
	if err != nil {
		return n, err
	}
	for _, fn := range rt.fns {
		fn.Recycle()
	}
	return n, nil
}

// ListenReset serves ServeReset on addr with Reset, logging each reset,
// until Stop.
func (rt *Runtime) ListenReset(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, l)
	go func() {
		_ = ServeReset(l, func(ctx context.Context) error {
			n, err := rt.Reset(ctx)
			rt.log.Info("state reset (FLUSHDB)", "items_deleted", n)
			return err
		}, rt.log)
	}()
	return l, nil
}

// ServeReset answers the few Redis (RESP) commands a test runner such as the
// OJS conformance runner (-redis) sends to reset its backend: FLUSHDB and
// FLUSHALL run reset; PING, SELECT, CLIENT, AUTH and QUIT are acknowledged.
// It returns when the listener is closed.
func ServeReset(l net.Listener, reset func(context.Context) error, log *slog.Logger) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go serveRESP(c, reset, log)
	}
}

func serveRESP(c net.Conn, reset func(context.Context) error, log *slog.Logger) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_, _ = fmt.Fprintf(c, "-ERR %s\r\n", err.Error())
			}
			return
		}
		if len(args) == 0 {
			continue
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "PING":
			reply = "+PONG\r\n"
		case "FLUSHDB", "FLUSHALL":
			if err := reset(context.Background()); err != nil {
				log.Error("reset failed", "error", err.Error())
				reply = "-ERR reset failed: " + strings.ReplaceAll(err.Error(), "\r\n", " ") + "\r\n"
			} else {
				reply = "+OK\r\n"
			}
		case "SELECT", "CLIENT", "AUTH":
			reply = "+OK\r\n"
		case "QUIT":
			_, _ = io.WriteString(c, "+OK\r\n")
			return
		default:
			reply = "-ERR unknown command '" + args[0] + "'\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings (or an inline command).
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil // inline command (e.g. from telnet)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1024 {
		return nil, fmt.Errorf("bad array length %q", line)
	}
	args := make([]string, 0, n)
	for range n {
		h, err := readLine(r)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(h, "$") {
			return nil, fmt.Errorf("expected a bulk string, got %q", h)
		}
		size, err := strconv.Atoi(h[1:])
		if err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bad bulk length %q", h)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:size]))
	}
	return args, nil
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
