package emulator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// TableAdmin is the part of the DynamoDB client that creates tables. On AWS
// the CDK stack creates the table; the local runtime and tests use this.
type TableAdmin interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// EnsureTable creates the table described by topology.JobTable (on-demand,
// stream with new and old images, TTL) unless it exists, and waits until it
// is active. It returns the table's stream ARN.
func EnsureTable(ctx context.Context, db TableAdmin, name string) (string, error) {
	spec := topology.JobTable
	attrs := map[string]string{spec.PartitionKey.Name: spec.PartitionKey.Type, spec.SortKey.Name: spec.SortKey.Type}
	var gsis []types.GlobalSecondaryIndex
	for _, ix := range spec.Indexes {
		attrs[ix.PartitionKey.Name] = ix.PartitionKey.Type
		attrs[ix.SortKey.Name] = ix.SortKey.Type
		p := &types.Projection{ProjectionType: types.ProjectionTypeAll}
		if ix.KeysOnly {
			p.ProjectionType = types.ProjectionTypeKeysOnly
		} else if len(ix.Include) > 0 {
			p.ProjectionType, p.NonKeyAttributes = types.ProjectionTypeInclude, ix.Include
		}
		gsis = append(gsis, types.GlobalSecondaryIndex{IndexName: aws.String(ix.Name), KeySchema: keySchema(ix.PartitionKey.Name, ix.SortKey.Name), Projection: p})
	}
	var defs []types.AttributeDefinition
	for n, t := range attrs {
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeType(t)})
	}
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:              aws.String(name),
		BillingMode:            types.BillingModePayPerRequest,
		AttributeDefinitions:   defs,
		KeySchema:              keySchema(spec.PartitionKey.Name, spec.SortKey.Name),
		GlobalSecondaryIndexes: gsis,
		StreamSpecification:    &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	if _, ok := errors.AsType[*types.ResourceInUseException](err); err != nil && !ok {
		return "", fmt.Errorf("create table %s: %w", name, err)
	}
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return "", fmt.Errorf("describe table %s: %w", name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			if _, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
				TableName:               aws.String(name),
				TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(spec.TTLAttribute), Enabled: aws.Bool(true)},
			}); err != nil && errors.As(err, new(*types.ResourceNotFoundException)) {
				return "", fmt.Errorf("enable TTL on %s: %w", name, err)
			}
			return aws.ToString(out.Table.LatestStreamArn), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func keySchema(partition, sort string) []types.KeySchemaElement {
	return []types.KeySchemaElement{{AttributeName: aws.String(partition), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(sort), KeyType: types.KeyTypeRange}}
}
