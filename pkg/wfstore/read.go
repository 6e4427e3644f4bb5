package wfstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// GetNode reads one node (consistent read).
func (s *Store) GetNode(ctx context.Context, wfID, path string) (Node, error) {
	return getNode[Node](ctx, s, wfID, path)
}

// GetRoot reads a workflow's root (consistent read).
func (s *Store) GetRoot(ctx context.Context, wfID string) (*Root, error) {
	return getNode[*Root](ctx, s, wfID, RootPath)
}

// GetComposite reads the composite at path (consistent read).
func (s *Store) GetComposite(ctx context.Context, wfID, path string) (*Composite, error) {
	if path == RootPath {
		r, err := s.GetRoot(ctx, wfID)
		if err != nil {
			return nil, err
		}
		return &r.Composite, nil
	}
	return getNode[*Composite](ctx, s, wfID, path)
}

// GetStep reads the job step at path (consistent read).
func (s *Store) GetStep(ctx context.Context, wfID, path string) (*Step, error) {
	return getNode[*Step](ctx, s, wfID, path)
}

func getNode[T Node](ctx context.Context, s *Store, wfID, path string) (T, error) {
	av, err := getItem(ctx, s, wfKey(wfID, nodeSK(path)), wfID+" "+path)
	if err != nil {
		var zero T
		return zero, err
	}
	return decodeAs[T](av)
}

// GetShard reads one counter shard (consistent read).
func (s *Store) GetShard(ctx context.Context, wfID, path, key string) (*Shard, error) {
	av, err := getItem(ctx, s, wfKey(wfID, shardSK(path, key)), wfID+" "+path+"#"+key)
	if err != nil {
		return nil, err
	}
	return decodeShard(av)
}

// getItem reads the item of s at key, named name in errors (consistent
// read); store.ErrNotFound when there is none. Like getNode, a function:
// the typed readers share it.
func getItem(ctx context.Context, s *Store, key map[string]types.AttributeValue, name string) (map[string]types.AttributeValue, error) {
	res, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	if len(res.Item) == 0 {
		return nil, store.ErrNotFound
	}
	return res.Item, nil
}

// NodeKey names a node of a workflow.
type NodeKey struct{ WorkflowID, Path string }

// ShardRef names a counter shard of a workflow.
type ShardRef struct{ WorkflowID, Path, Key string }

// Composite is the composite at k as read (the root's own for the root),
// or nil.
func (p *Progress) Composite(k NodeKey) *Composite { return CompositeOf(p.Nodes[k]) }

// Root is the root of workflow wfID as read, or nil.
func (p *Progress) Root(wfID string) *Root {
	r, _ := p.Nodes[NodeKey{wfID, RootPath}].(*Root)
	return r
}

// Progress is what a batch read of nodes, shards and jobs found, keyed by
// workflow id + path (nodes) and workflow id + path + "#" + key (shards);
// Jobs holds the ids of the jobs that exist.
type Progress struct {
	Nodes  map[NodeKey]Node
	Shards map[ShardRef]*Shard
	Jobs   map[string]bool
}

// ReadProgress reads nodes, shards and whether jobs exist, in batches of
// 100 (consistent reads); missing items are absent from the result.
func (s *Store) ReadProgress(ctx context.Context, nodes []NodeKey, shards []ShardRef, jobs []string) (*Progress, error) {
	p := &Progress{Nodes: map[NodeKey]Node{}, Shards: map[ShardRef]*Shard{}, Jobs: map[string]bool{}}
	var keys []map[string]types.AttributeValue
	for _, k := range nodes {
		keys = append(keys, wfKey(k.WorkflowID, nodeSK(k.Path)))
	}
	for _, k := range shards {
		keys = append(keys, wfKey(k.WorkflowID, shardSK(k.Path, k.Key)))
	}
	for _, id := range jobs {
		keys = append(keys, store.JobKey(id))
	}
	seen := map[string]bool{} // each item once
	keys = slices.DeleteFunc(keys, func(k map[string]types.AttributeValue) bool {
		dup := seen[itemKey(k)]
		seen[itemKey(k)] = true
		return dup
	})
	var mu sync.Mutex
	err := store.BatchGet(ctx, s.db, s.table, keys, "", func(av map[string]types.AttributeValue) error {
		mu.Lock()
		defer mu.Unlock()
		if id, ok := store.JobID(av); ok {
			p.Jobs[id] = true
			return nil
		}
		if sk := av[attrSK].(*types.AttributeValueMemberS).Value; strings.HasPrefix(sk, nodePrefix) {
			n, err := decodeNode(av)
			if err == nil {
				p.Nodes[NodeKey{n.Base().WorkflowID, n.Base().Path}] = n
			}
			return err
		}
		it, err := store.Unmarshal[shardItem](av)
		if err == nil {
			p.Shards[ShardRef{it.WFID, it.Path, it.Key}] = &it.Shard
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read workflow items: %w", err)
	}
	return p, nil
}

// WorkflowItems reads every node of a workflow (paginated query of its
// partition), root first.
func (s *Store) WorkflowItems(ctx context.Context, wfID string) ([]Node, error) {
	return s.Subtree(ctx, wfID, RootPath)
}

// Subtree reads the node at path and every node below it, in path order
// (the node itself first).
func (s *Store) Subtree(ctx context.Context, wfID, path string) ([]Node, error) {
	prefix := nodeSK(path)
	if path != RootPath {
		n, err := s.GetNode(ctx, wfID, path)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		more, err := s.queryNodes(ctx, wfID, prefix+"/")
		return append([]Node{n}, more...), err
	}
	return s.queryNodes(ctx, wfID, prefix)
}

func (s *Store) queryNodes(ctx context.Context, wfID, prefix string) ([]Node, error) {
	var nodes []Node
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :n)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(wfPrefix + wfID), ":n": store.AttrS(prefix)},
			ConsistentRead:            aws.Bool(true), ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("query workflow %s: %w", wfID, err)
		}
		for _, av := range out.Items {
			n, err := decodeNode(av)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, n)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nodes, nil
		}
		start = out.LastEvaluatedKey
	}
}
