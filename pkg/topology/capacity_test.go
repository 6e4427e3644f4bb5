package topology

import (
	"reflect"
	"testing"
)

func TestParseCapacity(t *testing.T) {
	def := &Capacity{MinRead: 5, MaxRead: 4000, MinWrite: 5, MaxWrite: 4000, TargetPercent: 70}
	for in, want := range map[string]*Capacity{
		"": nil, "on-demand": nil, "provisioned": def,
		"provisioned:15000,3000": {MinRead: 5, MaxRead: 3000, MinWrite: 5, MaxWrite: 15000, TargetPercent: 70},
	} {
		got, err := ParseCapacity(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseCapacity(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"provisioned:", "provisioned:100", "provisioned:1,1000", "provisioned:a,b", "reserved", "on-demand:5,5"} {
		if c, err := ParseCapacity(bad); err == nil {
			t.Errorf("ParseCapacity(%q) = %+v, want an error", bad, c)
		}
	}
}
